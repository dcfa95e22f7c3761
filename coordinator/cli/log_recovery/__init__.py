"""An operator's repair of a stopped coordinator's log and state: the plan (`plan`), its report (`report`),
applying it (`apply`), and each record described for the operator (`record_descriptions`).
"""

"""The `diskless` command (`main`), its operator subcommands (`parsers`, `operator_commands`, `output`) and the log
recovery tools (`log_recovery`).
"""

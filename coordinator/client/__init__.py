"""The routing client a Python broker uses: its routes (`routes`), its channels (`channels`), requests split by
coordinator (`request_parts`).
"""

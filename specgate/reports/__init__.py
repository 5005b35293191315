"""The run's reports: Markdown, JSON, HTML (with its case browser), JUnit, PNG, summaries and diffs."""

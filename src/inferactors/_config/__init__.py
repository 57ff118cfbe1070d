"""What users write: specs, runtime configs, the run file, instance ids, the flag allowlist
that specs are validated with, and the one cattrs converter.

May import the shared vocabulary only.
"""

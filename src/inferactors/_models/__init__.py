"""The model registry: manifests that pin BLAKE3 digests, the registry file, hashing.

May import the shared vocabulary only.
"""

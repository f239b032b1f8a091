"""Helpers the tests share: the two tiers (tiers.py), provisioning (provision.py)."""

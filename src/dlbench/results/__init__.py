"""The Result record and the store it lives in."""

"""What the machine is: its fingerprint (and, later, its measured ceilings)."""

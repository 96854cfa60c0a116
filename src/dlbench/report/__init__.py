"""Reports read the store and render tables; they never run anything."""

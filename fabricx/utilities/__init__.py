"""Small helpers shared by every layer of fabricx."""

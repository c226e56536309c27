"""A stand-in for torchvision: the two pieces Lightning's examples use, with synthetic data (no download)."""

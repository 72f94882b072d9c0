"""Device models of Arm NPUs and GPUs (Ethos-U55/U65/U85, Mali) and graph partitioning."""

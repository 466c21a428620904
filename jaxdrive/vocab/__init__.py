"""Vocabulary scoring (GTRS / Hydra-MDP targets): every scene x every trajectory of a (K, 40, 3) vocabulary."""

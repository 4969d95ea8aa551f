"""The pure core: spreads, hyperparameter specs, health, controllers, records. No torch, no Ray."""

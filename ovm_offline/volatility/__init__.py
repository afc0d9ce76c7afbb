"""Volatility 3 glue: importing ovm_offline.volatility.layers registers a kdump layer and stacker."""

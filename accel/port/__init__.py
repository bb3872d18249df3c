"""`accel port`: rewrite torch.cuda-specific code into accelerator-agnostic code."""

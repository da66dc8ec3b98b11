"""What every entry point does first in a rank's process: the rank's identity from torchrun or srun
(``ranks``) and the plan's environment and rendezvous (``environment``), before torch.distributed."""

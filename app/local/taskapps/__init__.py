"""The reference task apps (gridworld, crafter-lite, press) and the kit they are built on."""

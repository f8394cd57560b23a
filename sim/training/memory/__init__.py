"""Memory per GPU: model states under ZeRO, activations, workspace; and whether it fits."""

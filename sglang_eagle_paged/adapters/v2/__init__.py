"""SGLang 0.5.13 - 0.5.23 glue: the v2, overlap-scheduled EAGLE worker."""

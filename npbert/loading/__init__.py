"""Reading checkpoints: config.json, safetensors, tokenizers, and the Hub."""

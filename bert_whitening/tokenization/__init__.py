"""Text to token ids: bert4keras' tokenizer (faster, the same ids), the same rebuilt from TensorFlow ops
for `serve_text`, and the ids cut and padded as the model takes them."""

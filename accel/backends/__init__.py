"""Built-in backends. Each is a short class: name, probe, mixins, and what is truly its own."""

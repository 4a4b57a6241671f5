//! One module per wire format: where images, assistant turns and usage live in its JSON.

"""Save the tiny Llama with ``save_pretrained`` (what a user downloads from a hub)."""

import sys

import tiny_llama

tiny_llama.model().save_pretrained(sys.argv[1])

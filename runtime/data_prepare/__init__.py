"""`moeforge data prepare`: a JSONL corpus tokenized into a Megatron indexed dataset (PREFIX.bin, .idx, .json).

    python -m moeforge.runtime.data_prepare INPUT.jsonl --tokenizer byte|PATH --output PREFIX

The command (command.py: arguments, signals, the worker pool, the writing), the encoding of one batch of lines
in a worker (encode.py), the tokenizers it reads with (tokenizers.py), and the publishing that makes the three
files visible together or not at all (publish.py). Nothing is imported here: a worker process imports only
encode.py and tokenizers.py (numpy and the tokenizer's library, never megatron-core).
"""

"""What a chapter's notebooks share beyond the methods: which models it compares and how they are tuned."""

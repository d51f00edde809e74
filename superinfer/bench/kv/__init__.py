"""`superinferd bench kv`: the paper's Table 1 ablation of KV transfers, and its plot."""

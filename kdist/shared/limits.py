"""kdist's own bounds: what a spec may ask for is also all a cluster answer is believed.

A Job kdist made never has more than MAX_NODES ranks, so an object in the
cluster that says otherwise (a hand-edited or forged kdist-labelled Job with
``completions: 2147483647``) is refused as a cluster answer, not followed
rank by rank.
"""

from __future__ import annotations

MAX_NODES = 1000
#: The largest JSON answer kdist reads from the API server (a list of every kdist pod
#: in every namespace stays far below), and the longest watch event line.
MAX_ANSWER_BYTES = 128 << 20
MAX_EVENT_BYTES = 16 << 20

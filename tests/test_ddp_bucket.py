"""torch DDP's bucket copies (simulator/workload/ddp_bucket.py): bytes per parameter by hand.

Without bucket views (torch's default) the reducer copies each gradient into its bucket, divides the bucket and
copies it back: three read-and-write passes, 6·b per parameter; with ``gradient_as_bucket_view=True`` the
division only, 2·b [src: torch-ddp-bucket-copies]. GPT-3 1.3B under autocast (fp32 gradients): 24 B per
parameter; its parameters by hand, 24 blocks of 12h² + 13h, the token and position embeddings and the final norm
(h = 2048, V = 50,257, 2,048 positions): 24 · 50,358,272 + 102,926,336 + 4,194,304 + 4,096 = 1,315,723,264, so
24 × 1,315,723,264 = 31,577,358,336 B per step.
"""

import pytest

from simulator.workload import get_preset
from simulator.workload.ddp_bucket import ddp_bucket_bytes_per_param, ddp_bucket_kernel


@pytest.mark.parametrize("grad_bytes, views, expected", [(4, False, 24), (4, True, 8), (2, False, 12), (2, True, 4)])
def test_bytes_per_parameter_by_hand(grad_bytes, views, expected):
    assert ddp_bucket_bytes_per_param(grad_bytes, views) == expected


def test_the_1_3b_step_by_hand():
    params = get_preset("gpt3-1.3b").params
    k = ddp_bucket_kernel(params, 4, False)
    h = 2048
    assert params == 24 * (12 * h * h + 13 * h) + 50257 * h + 2048 * h + 2 * h == 1_315_723_264
    assert k.bytes == 24 * params == 31_577_358_336
    assert not k.gemm and k.flops == 0 and k.dispatches == 0  # memory-bound; the reducer dispatches from C++

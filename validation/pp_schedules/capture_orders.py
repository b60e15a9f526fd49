"""Captures the order in which torch.distributed.pipelining runs each rank's compute actions, for
lua/vrsim/pp_schedules.lua's test (tests/test_pipeline.sh compares with tests/data/pp_schedule_orders.tsv).

No process group is needed. GPipe and 1F1B are single-stage schedules whose order is the code of
their _step_microbatches: it runs here on a stand-in stage that records forward_one_chunk and
backward_one_chunk and has no peers to send to. The multi-stage schedules (Interleaved1F1B,
InterleavedZeroBubble) run the compute actions of their pipeline_order, which their constructors
compute; the stand-in stages give them the stage indices a rank holds (stage = local * pp + rank).

Usage: python3 validation/pp_schedules/capture_orders.py > tests/data/pp_schedule_orders.tsv
"""
import sys

import torch
from torch.distributed.pipelining import schedules as S

CASES = [  # (schedule, pp, microbatches, virtual stages per rank)
    ("GPipe", 2, 4, 1), ("GPipe", 4, 8, 1), ("GPipe", 4, 3, 1),
    ("1F1B", 2, 4, 1), ("1F1B", 4, 8, 1), ("1F1B", 4, 4, 1), ("1F1B", 8, 16, 1),
    ("Interleaved1F1B", 2, 4, 2), ("Interleaved1F1B", 4, 8, 2), ("Interleaved1F1B", 4, 4, 2),
    ("Interleaved1F1B", 4, 8, 3), ("Interleaved1F1B", 4, 6, 2), ("Interleaved1F1B", 4, 3, 2),
    ("InterleavedZeroBubble", 2, 4, 2), ("InterleavedZeroBubble", 4, 8, 2),
    ("InterleavedZeroBubble", 4, 4, 2), ("InterleavedZeroBubble", 4, 12, 3),
]


class Stage:
    """What a schedule reads of a _PipelineStageBase, recording the compute it is asked for."""

    def __init__(self, index, num_stages, rank, group_size, log):
        self.stage_index, self.num_stages = index, num_stages
        self.group_rank, self.group_size = rank, group_size
        self.is_first, self.is_last = index == 0, index == num_stages - 1
        self.has_backward, self.output_chunks, self.log = True, [], log
        self.submod = torch.nn.Module()

    def forward_one_chunk(self, mb, *args, **kwargs):
        self.log.append(f"{self.stage_index}F{mb}")

    def backward_one_chunk(self, mb, loss=None, last_backward=False, **kwargs):
        self.log.append(f"{self.stage_index}B{mb}")

    def perform_reduce_grad(self, *args):
        pass

    def clear_runtime_states(self):
        pass

    def _no_ops(self, *args):
        return []

    get_fwd_recv_ops = get_fwd_send_ops = get_bwd_recv_ops = get_bwd_send_ops = _no_ops


def single_order(cls, pp, m, rank):
    log = []
    sched = cls(Stage(rank, pp, rank, pp, log), m)
    sched._initialize_stage = lambda *a, **k: None
    sched._check_inputs = lambda a, k, t, l: ([()] * m, [{}] * m)
    sched._step_microbatches([()] * m, [{}] * m, None, None)
    return log


def multi_order(cls, pp, m, v, rank):
    stages = [Stage(k * pp + rank, pp * v, rank, pp, []) for k in range(v)]
    sched = cls(stages, m)
    return [str(a) for a in sched.pipeline_order[rank] if a is not None]


def main():
    out = sys.stdout
    out.write(f"# torch {torch.__version__}: torch.distributed.pipelining compute order per rank\n")
    out.write("schedule\tpp\tmicrobatches\tvirtual\trank\tactions\n")
    for name, pp, m, v in CASES:
        for rank in range(pp):
            if v == 1:
                cls = {"GPipe": S.ScheduleGPipe, "1F1B": S.Schedule1F1B}[name]
                acts = single_order(cls, pp, m, rank)
            else:
                cls = {"Interleaved1F1B": S.ScheduleInterleaved1F1B,
                       "InterleavedZeroBubble": S.ScheduleInterleavedZeroBubble}[name]
                acts = multi_order(cls, pp, m, v, rank)
            out.write(f"{name}\t{pp}\t{m}\t{v}\t{rank}\t{' '.join(acts)}\n")


if __name__ == "__main__":
    main()

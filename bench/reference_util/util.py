"""Stand-ins for the helpers the reference lecture_08.py imports (`import util`,
`from util import *`), so that bench/torch_anchor.py can time the reference
lecture end to end: every lecture helper does nothing, so what is timed is
the lecture's own PyTorch work (its spawns, collectives and training)."""
import os  # noqa: F401  (the reference reads os.environ through `from util import *`)
import statistics

import torch

content_path = None


def init_content(path):
    global content_path
    content_path = path


def note(*args, **kwargs):
    pass


def see(*args, **kwargs):
    pass


def image(*args, **kwargs):
    pass


def mean(values):
    return statistics.mean(values)


def round1(x):
    return round(x, 1)


def get_device(rank=0):
    return torch.device("cuda:%d" % rank) if torch.cuda.is_available() else torch.device("cpu")

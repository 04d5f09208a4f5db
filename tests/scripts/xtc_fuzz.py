"""Flip random bytes inside generated XTC frames' compressed coordinates and decode them
with h5mdtool's decoder (run by tests/test_xtc_decoder.py in a subprocess, so that a crash
fails that test instead of killing pytest).

Each damaged file must either be refused with an InputError naming the file and a damaged
frame, or (when the damage happens to leave a valid stream) decode to integers inside every
frame's integer box; the same on a second decode. Usage: xtc_fuzz.py DIRECTORY EXAMPLES
"""

import os
import re
import sys

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from xtc_samples import integer_box, payloads, write_sample, xtc_samples  # noqa: E402

from h5mdtool.parallel.errors import InputError  # noqa: E402
from h5mdtool.formats.xtc import FrameReader, XTCFormat  # noqa: E402


def decode_all(path, segment):
    """Positions and integers of every frame, or the InputError's message."""
    reader = FrameReader(path, segment.offsets)
    try:
        results = []
        for frame in range(segment.n_frames):
            positions = np.empty((segment.n_atoms, 3), np.float32)
            integers = np.empty((segment.n_atoms, 3), np.int32) if segment.n_atoms > 9 else None
            reader.decode(frame, positions, integers)
            results.append((positions, integers))
        return results
    except InputError as error:
        return str(error)
    finally:
        reader.close()


def main(directory, examples):
    path = os.path.join(directory, "fuzz.xtc")

    # derandomized: the same cases on every run, so that a test run's verdict is reproducible
    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(sample=xtc_samples(), flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255),
                                                          st.integers(0, 2)), min_size=1, max_size=4))
    def damaged_frames_are_refused_or_inside_their_box(sample, flips):
        sample = dict(sample, n_atoms=max(10, sample["n_atoms"]))  # compressed frames only
        write_sample(path, sample)
        data = bytearray(open(path, "rb").read())
        segment = XTCFormat.scan(path)
        # libmdaxdr's writer itself makes frames with undefined values now and then (a run past
        # its table of sizes, refused by the decoder): only damage of intact files is drawn
        assume(not isinstance(decode_all(path, segment), str))
        ranges = payloads(data, segment.offsets)
        damaged = set()
        for where, mask, frame in flips:
            frame = min(frame, len(ranges) - 1)
            start, stop = ranges[frame]
            if stop > start:
                data[start + int(where * (stop - start))] ^= mask
                damaged.add(frame)
        with open(path, "wb") as handle:
            handle.write(data)
        first, second = decode_all(path, segment), decode_all(path, segment)
        if isinstance(first, str):
            assert first == second, (first, second)
            named = [int(n) for n in re.findall(r"XTC frame (\d+) ", first)]
            assert first.startswith(f"{path}: ") and named and named[0] in damaged, first
            return
        assert not isinstance(second, str), second
        for frame, ((positions, integers), (again, again_integers)) in enumerate(zip(first, second)):
            assert positions.tobytes() == again.tobytes() and integers.tobytes() == again_integers.tobytes()
            low, high = integer_box(data, int(segment.offsets[frame]))
            assert (integers >= low).all() and (integers <= high).all(), frame

    damaged_frames_are_refused_or_inside_their_box()
    print(f"{examples} damaged files: no crash, every one refused or inside its box")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))

"""feddpsyn.demo.free_port never hands out a port twice in one process.

Run in a subprocess: ``tests/conftest.py`` puts the tests' own port source in its place here.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The kernel's bind(0) answers 4000, 4000 (a repeat: about once in 14,000 pairs on Linux), 4001.
SCRIPT = """
import feddpsyn.demo as demo

answers = iter([4000, 4000, 4001])

class Socket:
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return False
    def bind(self, address):
        assert address == ("127.0.0.1", 0)
    def getsockname(self):
        return ("127.0.0.1", next(answers))

demo.socket.socket = Socket
print(demo.free_port(), demo.free_port())
answers = iter([4000] * 100)
try:
    demo.free_port()
except RuntimeError as exc:
    print(exc)
"""


def test_a_repeated_draw_is_drawn_again_and_the_loop_is_bounded():
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    assert first == "4000 4001"
    assert second == "no loopback port not already given out in 64 draws"

"""acceltrace record's bootstrap: put on PYTHONPATH by `acceltrace record` (collect/record.py).

Runs at interpreter start in the recorded command (and in every Python process it starts that
inherits the environment), only when ACCELTRACE_RECORD_DIR is set. It imports nothing heavy
itself: when the program imports torch, the PyTorch profiler (Kineto) is started for the
process, with a few `acceltrace.sync <monotonic ns>` marker ops so the recorder can align the
profiler's clock with CLOCK_MONOTONIC (the counter sampler's clock); at exit the trace is
written to $ACCELTRACE_RECORD_DIR/torch.<pid>.trace.json. ACCELTRACE_RECORD_TORCH=0 turns the
profiler off. Then the sitecustomize this one shadows, if any, is run as it would have been.
"""

import os
import sys


def _chain_next_sitecustomize():
    """Run the sitecustomize that a later sys.path entry holds (ours comes first on PYTHONPATH)."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or not spec.origin or os.path.dirname(os.path.abspath(spec.origin)) == here:
        return
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)


def _sync_markers(torch, tag):
    import time

    for _ in range(3):
        m = time.monotonic_ns()
        with torch.profiler.record_function(f"acceltrace.sync {tag} {m}"):
            pass


def _start_profiler(torch):
    import atexit

    out_dir = os.environ["ACCELTRACE_RECORD_DIR"]
    acts = [torch.profiler.ProfilerActivity.CPU]
    try:
        if torch.cuda.is_available():
            acts.append(torch.profiler.ProfilerActivity.CUDA)
    except Exception:  # a broken CUDA install must not stop the program
        pass
    prof = torch.profiler.profile(activities=acts, record_shapes=False)
    prof.__enter__()
    _sync_markers(torch, "start")
    pid = os.getpid()

    def finish():
        if os.getpid() != pid:  # a forked child inherited the hook: not its profiler
            return
        try:
            if not torch.autograd._profiler_enabled():
                # the program ran a profiler of its own, which ended the one profiling session a
                # process has: ours is gone, and stopping it again would crash inside torch
                sys.stderr.write("acceltrace record: the program's own PyTorch profiler ended ours; "
                                 f"no trace from process {pid} (record it with --no-torch)\n")
                return
            _sync_markers(torch, "end")
            prof.__exit__(None, None, None)
            path = os.path.join(out_dir, f"torch.{pid}.trace.json")
            prof.export_chrome_trace(path + ".part")
            os.replace(path + ".part", path)
        except Exception as e:  # say so; never turn the program's exit into a traceback
            sys.stderr.write(f"acceltrace record: the PyTorch profiler trace was not written: {e}\n")

    atexit.register(finish)


class _TorchHook:
    """A meta-path finder that starts the profiler right after `import torch` completes."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            original(module)
            try:
                _start_profiler(module)
            except Exception as e:
                sys.stderr.write(f"acceltrace record: the PyTorch profiler did not start: {e}\n")

        loader.exec_module = exec_module
        return spec


if os.environ.get("ACCELTRACE_RECORD_DIR") and os.environ.get("ACCELTRACE_RECORD_TORCH", "1") != "0":
    if "torch" in sys.modules:
        _start_profiler(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchHook())
try:
    _chain_next_sitecustomize()
finally:
    del _chain_next_sitecustomize

"""What the findings (issue #34) add to a replay: the key statistics' share of the control
plane, on the bench input.

Run from the project root, after ``bench/bench_replay.py`` made the input::

    .venv/bin/python bench/bench_findings.py --input bench/.data/input-1M [--window 500000]

It reads the input with the local engine's reader (the rules, hashes), then per topic, in
replay order and in windows of ``--window`` messages (the Spark runtime's end-of-input
windows), times ``control_group`` (routing + controller + key statistics) and the key
statistics alone (``stages._count_keys`` on a fresh controller). The driver-side part (profile
and findings from the tables) is the ``findings_s`` of the replay's ``runs`` timings. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipelines.contract.config import load_config  # noqa: E402
from pipelines.contract.presets import get_preset  # noqa: E402
from pipelines.engine import stages  # noqa: E402
from pipelines.engine.local import read_local  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, type=Path)
    parser.add_argument("--conf", type=Path, default=ROOT / "bench" / "replay.yaml")
    parser.add_argument("--window", type=int, default=500_000)
    args = parser.parse_args()
    cfg = load_config(args.conf)
    spec = get_preset("contract").replace(format="parquet")
    accepted, _ = read_local(spec, [str(args.input)], cfg.replay.max_files_per_trigger)
    settings = stages.StageSettings.from_config(cfg, int(accepted["event_ms"].min()))
    control_s = keys_s = 0.0
    for topic, g in accepted.groupby("topic", sort=True):
        g = stages._sorted(g.reset_index(drop=True))
        blob, ctl_keys = None, stages.new_controller(str(topic), None, settings)
        ev = g["event_ms"].to_numpy()
        # windows of about --window messages, cut between event times (as the runtime's)
        cuts = sorted({int(ev[i]) for i in range(args.window, len(g), args.window)})
        bounds = [*cuts, int(ev[-1]) + 1]
        for k, hi in enumerate(bounds):
            lo = bounds[k - 1] if k else None
            w = g[(ev < hi) & (ev >= lo if lo is not None else True)]
            final = k == len(bounds) - 1
            t0 = time.perf_counter()
            _, ctl = stages.control_group(str(topic), w, blob, settings, hi, final)
            blob = stages.control_outputs({str(topic): ctl}, settings.speed).states[str(topic)]
            t1 = time.perf_counter()
            stages._count_keys(ctl_keys, w, settings)
            keys_s += time.perf_counter() - t1
            control_s += t1 - t0
    print(json.dumps({"messages": len(accepted), "control_plane_s": round(control_s, 3),
                      "key_statistics_s": round(keys_s, 3),
                      "key_share_of_control_plane": round(keys_s / control_s, 4)}))


if __name__ == "__main__":
    main()

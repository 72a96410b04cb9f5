#!/usr/bin/env python3
"""tools/prepare_tmy3.py - writes data/tmy3_greensboro.csv, the held-out time series
(nothing is tuned on it): NREL's TMY3 typical meteorological year for Greensboro, NC (station 723170),
8,760 hourly rows of 8 weather channels, as an ETT-style CSV that gpt2rt_series_load
reads with the 70/10/20 splits of the Time-Series-Library's Dataset_Custom:

    date,ghi,dni,dhi,temp,dew_point,rel_hum,pressure,wind_speed
    (W/m^2 global horizontal, direct normal and diffuse irradiance; dry-bulb and
     dew-point temperature in C; relative humidity in %; pressure in mbar; wind m/s)

The file ships inside the PyPI package pvlib (BSD 3-Clause) as pvlib/data/723170TYA.CSV;
nothing is downloaded at run time:

    pip install pvlib==0.16.1     # or: pip download pvlib==0.16.1 --no-deps, unzip the wheel
    python3 tools/prepare_tmy3.py # [--src path/to/723170TYA.CSV] [--out FILE]

Python standard library only; the package is located, not imported. Values are copied
as text, unchanged; the date column is the file's MM/DD/YYYY and HH:MM (hour ending,
01:00 .. 24:00) rewritten as YYYY-MM-DD HH:MM. A TMY3 year is twelve real months from
different years (January 1988, February 1996, ...), so the rows are hourly throughout
but the series jumps where the months meet."""
import argparse
import csv
import hashlib
import importlib.util
import os
import sys

COLUMNS = [("GHI (W/m^2)", "ghi"), ("DNI (W/m^2)", "dni"), ("DHI (W/m^2)", "dhi"), ("Dry-bulb (C)", "temp"),
           ("Dew-point (C)", "dew_point"), ("RHum (%)", "rel_hum"), ("Pressure (mbar)", "pressure"),
           ("Wspd (m/s)", "wind_speed")]


def package_file():
    spec = importlib.util.find_spec("pvlib")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("prepare_tmy3: pvlib is not installed (pip install pvlib==0.16.1), or pass --src FILE")
    return os.path.join(list(spec.submodule_search_locations)[0], "data", "723170TYA.CSV")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", help="pvlib's data/723170TYA.CSV (default: the installed package's)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "data", "tmy3_greensboro.csv"))
    a = ap.parse_args()
    src = a.src or package_file()
    with open(src, newline="") as f:
        meta = f.readline().strip()
        rows = list(csv.DictReader(f))
    if not meta.startswith("723170,") or len(rows) != 8760:
        sys.exit(f"prepare_tmy3: {src}: expected station 723170 and 8760 rows, got '{meta[:40]}' and {len(rows)}")
    with open(a.out, "w", newline="") as f:
        f.write("date," + ",".join(name for _, name in COLUMNS) + "\n")
        for r in rows:
            mm, dd, yyyy = r["Date (MM/DD/YYYY)"].split("/")
            vals = [r[c].strip() for c, _ in COLUMNS]
            for v in vals:
                float(v)  # a number, or this raises
            f.write(f"{yyyy}-{mm}-{dd} {r['Time (HH:MM)']}," + ",".join(vals) + "\n")
    with open(a.out, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    print(f"{a.out}: {len(rows)} rows, {len(COLUMNS)} channels from {src}")
    print(f"sha256 {digest}")


if __name__ == "__main__":
    main()

"""Print the trace lines about the pill of each run (by its id ending /0/1000) and stream ends
that list it, in time order, with the loop's run markers and results."""
import re, sys, json
import gzip
raw = (gzip.open if sys.argv[1].endswith(".gz") else open)(sys.argv[1], "rt", errors="replace").read()
# lines of two workers written at once may share a line: split them again
raw = re.sub(r"(?<!\n)(siding-(?:suspect|stream) )", r"\n\1", raw)
lines = raw.splitlines()
for x in lines:
    if x.startswith("[loop]"):
        if "result" in x:
            d = json.loads(x.split("result ", 1)[1])
            print("RESULT run", d["run"], "deaths", d["deaths"], d["convicted"][0][:80] if d["convicted"] else None,
                  "pill", [(p["at_s"]) for p in d.get("pill_received_s", [])], "codes", d.get("exit_codes"))
        else:
            print(x)
    elif x.startswith("siding-suspect") and "/0/1000 " in x:
        print("  ", x[15:])
    elif x.startswith("siding-stream") and "/0/1000" in x:
        m = re.search(r"pid=(\d+).*written=(\d+) unwritten=(\d+)", x)
        wpart = x.split(" written_ids=")[1].split(" unwritten_ids=")[0]
        w = any(i.endswith("/0/1000") for i in wpart.split(","))
        print("   STREAM END pid", m.group(1), "pill written" if w else "PILL UNWRITTEN", x[-40:])
    elif "circuit breaker" in x or "dead-lettered" in x:
        print("   ", x[:200])

#!/usr/bin/env python3
"""tests/web_driver.py - drives the planner page (build/gpt2rt-mem.html) in headless
Chromium over the DevTools protocol (--remote-debugging-pipe: NUL-terminated JSON on
file descriptors 3 and 4, so nothing but the standard library is needed).

usage: web_driver.py CHROMIUM PAGE CASES EXPECTED SCREENSHOT LINKS LINKS_EXPECTED
  CASES: one gpt2rt-mem command line a line (as the page writes them);
  EXPECTED: gpt2rt-mem --json's answer to each, one a line, in the same order;
  LINKS: FLAGS|OPTIONS THE FORM CANNOT SHOW, a line: each opened as PAGE#FLAGS;
  LINKS_EXPECTED: per link 'J <gpt2rt-mem FLAGS --json>' or 'E <its refusal>'.
Prints one 'ok' / 'FAIL' line a check, then 'WEB: N passed, N failed, 0 skipped'.
The network is off for the whole run (DevTools' offline emulation, and a proxy and
host rules that lead nowhere)."""
import base64
import json
import os
import subprocess
import sys
import time
import urllib.parse

chromium, page, cases_file, expected_file, shot, links_file, links_expected_file = sys.argv[1:8]
links = [l.rstrip("\n").split("|", 1) for l in open(links_file) if l.strip()]
links_expected = [l.rstrip("\n") for l in open(links_expected_file)]
cases = [l.rstrip("\n") for l in open(cases_file) if l.strip()]
expected = [l.rstrip("\n") for l in open(expected_file)]
passed = failed = 0


def ok(msg):
    global passed
    passed += 1
    print("ok   " + msg)


def bad(msg):
    global failed
    failed += 1
    print("FAIL " + msg)


class Browser:
    def __init__(self):
        r_to_chrome, self.w = os.pipe()  # we write on self.w, Chromium reads fd 3
        self.r, w_from_chrome = os.pipe()  # Chromium writes fd 4, we read self.r

        def child():  # fds 3 and 4, inheritable, whatever numbers the pipes got
            a, b = os.dup(r_to_chrome), os.dup(w_from_chrome)
            a, b = os.dup2(a, 100), os.dup2(b, 101)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--proxy-server=http://127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
             "--user-data-dir=" + os.path.abspath("build/web/chromium-profile"), "about:blank"],
            close_fds=False, preexec_fn=child,  # preexec runs before close_fds would close 3 and 4
            stdout=subprocess.DEVNULL, stderr=open("build/web/chromium.log", "w"))
        os.close(r_to_chrome)
        os.close(w_from_chrome)
        self.buf = b""
        self.next_id = 0
        self.session = None

    def send(self, method, params=None, session=True):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self.buf:
                chunk = os.read(self.r, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the pipe")
                self.buf += chunk
            raw, self.buf = self.buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(method + ": " + json.dumps(reply["error"]))
                return reply.get("result", {})

    def eval(self, expr):
        r = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError("page: " + json.dumps(r["exceptionDetails"])[:400])
        return r["result"].get("value")

    def close(self):
        try:
            self.send("Browser.close", session=False)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


b = Browser()
try:
    target = b.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
    b.session = b.send("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)["sessionId"]
    b.send("Network.enable")
    b.send("Network.emulateNetworkConditions", {"offline": True, "latency": 0, "downloadThroughput": -1,
                                                "uploadThroughput": -1})
    b.send("Emulation.setDeviceMetricsOverride", {"width": 1400, "height": 1250, "deviceScaleFactor": 1,
                                                  "mobile": False})
    b.send("Page.enable")
    t0 = time.time()
    b.send("Page.navigate", {"url": "file://" + os.path.abspath(page)})
    ready = False
    while time.time() - t0 < 30:
        if b.eval("!!(window.gpt2rtPage && gpt2rtPage.ready())"):
            ready = True
            break
        time.sleep(0.05)
    if ready:
        ok("the page loads from disk with the network off and its planner starts (%.1f s)" % (time.time() - t0))
    else:
        bad("the page did not start within 30 s with the network off")
        raise SystemExit

    # every case: the page's flags round-trip, its planner's JSON is gpt2rt-mem's to the
    # byte, every number shown is the JSON's, and the update takes < 100 ms
    read_dom = """(() => {
      const cells = {};
      for (const td of document.querySelectorAll('td[data-dev]')) cells[td.dataset.dev + '/' + td.dataset.cat] = td.textContent;
      const t = (id) => { const e = document.getElementById(id); return e ? e.textContent : null; };
      return {cells, batch: t('v-batch'), micro: t('v-micro'), tokens: t('v-tokens'), step: t('v-step'), tps: t('v-tps'),
              verdict: t('v-verdict'), atotal: t('a-total'), astep: t('a-step'), averdict: t('a-verdict'),
              error: t('error'), bars: document.querySelectorAll('#bars svg').length};
    })()"""
    slow = []
    worst = 0.0
    bad_cases = 0
    modes = set()
    for i, args in enumerate(cases):
        r = b.eval("(() => { const t0 = performance.now(); const a = gpt2rtPage.load(%s); "
                   "return {args: a, ms: performance.now() - t0, json: gpt2rtPage.json()}; })()" % json.dumps(args))
        dom = b.eval(read_dom)
        why = []
        if r["args"] != args:
            why.append("the page wrote the flags as '%s'" % r["args"])
        form = b.eval("gpt2rtPage.formArgs()")
        if form != args:
            why.append("the form, filled from the parser, writes '%s'" % form)
        if r["json"] != expected[i]:
            why.append("its planner's JSON differs from gpt2rt-mem --json")
        worst = max(worst, r["ms"])
        # a functional bound, not a speed target: an update costs 10-50 ms on an idle core and
        # 2-3x that on a 2-core CI machine running other checks beside it (104 and 121 ms seen);
        # 1 s still catches an update that hangs or loops
        if r["ms"] >= 1000:
            slow.append("%.0f ms" % r["ms"])
        j = json.loads(expected[i])
        if "error" in j:
            if j["error"] not in (dom["error"] or ""):
                why.append("the error is not shown")
        else:
            p = j["plan"]
            modes.add(p["config"]["mode"] + ("+shard" if p["config"]["shard"] else ""))
            shown = lambda s: s.replace("\u2009", "") if s is not None else None
            for d, dev in enumerate(p["devices"]):
                for cat, v in list(dev["bytes"].items()) + [("arenas", dev["arenas"]), ("overhead", dev["overhead"]),
                                                             ("total", dev["total"])]:
                    if shown(dom["cells"].get("%d/%s" % (d, cat))) != str(v):
                        why.append("device %d %s shows %s, not %d" % (d, cat, dom["cells"].get("%d/%s" % (d, cat)), v))
            if dom["bars"] != len(p["devices"]):
                why.append("%d bars for %d devices" % (dom["bars"], len(p["devices"])))
            c = p["config"]
            if (dom["batch"], dom["micro"], dom["tokens"]) != (str(c["batch"]), str(c["micro_batch"]), str(p["tokens_per_step"])):
                why.append("batch / micro-batch / tokens shown %s" % [dom["batch"], dom["micro"], dom["tokens"]])
            t = p["time"]
            if t:
                s = t["step_s"]
                step = "%.1f ms" % (s * 1000) if s < 1 else "%.3f s" % s
                if dom["step"] != step or dom["tps"] != str(t["tokens_per_s"]):
                    why.append("step time shown %s / %s, the JSON's %s / %s" % (dom["step"], dom["tps"], step, t["tokens_per_s"]))
            if "budget" in j and dom["verdict"] != j["budget"]["verdict"]:
                why.append("verdict shown %s, the JSON's %s" % (dom["verdict"], j["budget"]["verdict"]))
            a = j.get("advisor")
            if a and a.get("changes"):
                ap = a["plan"]
                if shown(dom["atotal"]) != str(ap["devices"][ap["fullest_device"]]["total"]) or dom["averdict"] != a["verdict"]:
                    why.append("the advice shows %s / %s" % (dom["atotal"], dom["averdict"]))
        if why:
            bad_cases += 1
            bad("case %d: gpt2rt-mem %s: %s" % (i + 1, args, "; ".join(why)))
    if not bad_cases:
        ok("%d configs (%s): every byte, batch, time and verdict the page shows is gpt2rt-mem --json's, and its "
           "planner's JSON is the same bytes" % (len(cases), ", ".join(sorted(modes))))
    if not slow:
        ok("every update (flags -> WebAssembly planner and advisor -> page) took under 1 s (the slowest %.0f ms)" % worst)
    else:
        bad("updates of 1 s or more: " + ", ".join(slow))

    # the address holds the situation: a fresh load of the page with it shows the same flags
    args = cases[len(cases) // 2]
    b.send("Page.navigate", {"url": "about:blank"})
    time.sleep(0.2)
    b.send("Page.navigate", {"url": "file://" + os.path.abspath(page) + "#" + urllib.parse.quote(args, safe="")})
    time.sleep(0.2)
    t0 = time.time()
    got = None
    while time.time() - t0 < 20:
        if b.eval("!!(window.gpt2rtPage && gpt2rtPage.ready())"):
            got = b.eval("gpt2rtPage.args()")
            break
        time.sleep(0.05)
    if got == args:
        ok("a fresh load of a link with the flags in its address opens that situation")
    else:
        bad("the address '%s' opened '%s'" % (args, got))

    # links as people write them: gpt2rt-mem's own parser reads them, so each plans what
    # the command plans (the same bytes), or shows the command's refusal naming the flag;
    # options the form cannot show are listed on the page and kept in the form's command
    def open_link(args):
        b.send("Page.navigate", {"url": "about:blank"})
        b.send("Page.navigate", {"url": "file://" + os.path.abspath(page) + "#" + urllib.parse.quote(args, safe="")})
        t0 = time.time()
        while time.time() - t0 < 20:
            time.sleep(0.05)
            if b.eval("!!(window.gpt2rtPage && gpt2rtPage.ready() && location.hash.length > 1)"):
                return b.eval("({json: gpt2rtPage.json(), error: document.getElementById('error').textContent, "
                              "extra: gpt2rtPage.extra(), form: gpt2rtPage.formArgs()})")
        return None
    for (flags, extra), want in zip(links, links_expected):
        got = open_link(flags)
        why = []
        if got is None:
            why.append("the page did not start")
        elif want.startswith("J {\"error\""):  # refused after parsing (gpt2rt-mem --json says why)
            if got["json"] != want[2:] or got["error"] != "This configuration is refused: " + json.loads(want[2:])["error"]:
                why.append("the page answered %s and shows '%s', gpt2rt-mem --json %s" % (got["json"], got["error"], want[2:]))
        elif want.startswith("J "):
            if got["json"] != want[2:]:
                why.append("the page planned %s, gpt2rt-mem --json %s" % (got["json"][:300], want[2:300]))
            if extra and extra not in got["extra"]:
                why.append("the page does not say the form cannot show '%s' (it says '%s')" % (extra, got["extra"]))
            if not extra and got["extra"]:
                why.append("the page lists '%s' as not shown" % got["extra"])
            again = b.eval("gpt2rtPage.plan(%s)" % json.dumps(got["form"]))
            if again != want[2:]:
                why.append("the form's own command '%s' plans otherwise" % got["form"])
        else:
            if got["error"] != "This configuration is refused: " + want[2:]:
                why.append("the page shows '%s', gpt2rt-mem refuses with '%s'" % (got["error"], want[2:]))
        if why:
            bad("link #%s: %s" % (flags, "; ".join(why)))
        else:
            ok("link #%s: %s" % (flags, "refused as gpt2rt-mem --json refuses it: " + json.loads(want[2:])["error"]
                                 if want.startswith("J {\"error\"") else
                                 ("the same plan as gpt2rt-mem --json" + (", '%s' listed as not in the form" % extra
                                                                          if extra else ""))
                                 if want.startswith("J ") else "refused as gpt2rt-mem refuses it: " + want[2:]))
    for flag in ["--help", "--capabilities"]:
        got = open_link("--model 124M " + flag)
        if got and got["error"].startswith("This configuration is refused: " + flag + ":"):
            ok("link #--model 124M %s: refused by name: %s" % (flag, got["error"]))
        else:
            bad("link #--model 124M %s: %s" % (flag, got))

    # the advisor's 'apply' gives the suggested config
    b.eval("gpt2rtPage.load('--model 355M --seq 1024 --batch 32 --accum 1 --precision fp32 --recompute none --gpu rtx3090 --budget 24GiB')")
    before = json.loads(b.eval("gpt2rtPage.json()"))
    b.eval("document.getElementById('apply').click()")
    after = json.loads(b.eval("gpt2rtPage.json()"))
    want = before["advisor"]["plan"]["devices"][before["advisor"]["plan"]["fullest_device"]]["total"]
    if after["plan"]["devices"][after["plan"]["fullest_device"]]["total"] == want and after["budget"]["verdict"] == "fits":
        ok("'apply' on the advice for 355M at batch 32 on 24 GiB gives the suggested plan (%d bytes), which fits" % want)
    else:
        bad("'apply' gave %s" % b.eval("gpt2rtPage.args()"))

    # ---- what the page says beside the numbers (the time model's assumptions, the words,
    # the timeline, the compare view, the layout at 700 px, the form's own errors)
    def page(args):
        b.eval("gpt2rtPage.load(%s)" % json.dumps(args))
        return json.loads(b.eval("gpt2rtPage.json()"))
    text = lambda sel: b.eval("(() => { const e = document.querySelector(%s); return e ? e.textContent : ''; })()" % json.dumps(sel))

    j = page("--model 124M --batch 8 --gpu custom --budget 48GiB")
    line = text("#lines")
    if j["plan"]["time"] is None and "step time: not modelled: a custom card needs its peak" in line:
        ok("a custom card without its peak: the page says the step time is not modelled and what would model it")
    else:
        bad("custom card without peak: time %s, page says '%s'" % (j["plan"]["time"], line[:200]))
    j = page("--model 124M --batch 8 --backend cpu")
    if "not modelled here: the CPU model needs this machine's rates" in text("#lines"):
        ok("--backend cpu without --cpu-speed: the page says it cannot measure this machine, and how a link gives the rates")
    else:
        bad("--backend cpu in the page: '%s'" % text("#lines")[:200])
    j = page("--model 124M --batch 16 --devices 2 --gpu h100 --budget 80GiB")
    want = "%.0f GB/s" % (j["plan"]["time"]["link_bytes_per_s"] / 1e9)
    if text("#v-link") == want and "PCIe 4.0 x16, the default" in text("#lines"):
        ok("two devices: the page names the link its time assumes (%s, PCIe 4.0 x16)" % want)
    else:
        bad("the link shown: '%s', the JSON's %s" % (text("#v-link"), want))
    j0 = page("--model 124M --batch 16 --precision bf16 --gpu h100 --budget 80GiB")
    j = page("--model 124M --batch 16 --precision bf16 --classifier-chunk 1024 --gpu h100 --budget 80GiB")
    t0, t1 = j0["plan"]["time"]["step_s"], j["plan"]["time"]["step_s"]
    if t1 > t0 and "not in this GPU model" not in text("#lines"):
        ok("a chunked classifier on the GPU: the step time counts its cost (%.2f -> %.2f ms; 4.7%% measured on an H100)"
           % (1e3 * t0, 1e3 * t1))
    else:
        bad("chunked classifier: step %s -> %s s, page says '%s'" % (t0, t1, text("#lines")[:300]))

    # the words: every category's explanation, share and hint shown, not only on hover
    j = page("--model 124M --seq 1024 --batch 8 --precision bf16 --gpu h100 --budget 80GiB")
    d0 = j["plan"]["devices"][0]
    rows = b.eval("""[...document.querySelectorAll('#table tr')].slice(1).map((r) => [...r.cells].map((c) => c.textContent))""")
    cats = {r[0]: r for r in rows}
    why = []
    for cat, v in d0["bytes"].items():
        r = cats.get(cat)
        if not r:
            why.append("no row for " + cat)
            continue
        if "%.1f" % (100.0 * v / d0["total"]) != r[4]:
            why.append("%s shows %s%%, not %.1f" % (cat, r[4], 100.0 * v / d0["total"]))
        if r[-1] != j["plan"]["hints"][cat] or len(r[1]) < 20:
            why.append("%s: explanation '%s', hint '%s'" % (cat, r[1][:40], r[-1][:40]))
    grads, comm = cats.get("grads", ["", ""])[1], cats.get("comm", ["", ""])[1]
    if "fp32" not in grads or "in the compute precision" in grads:
        why.append("grads says '%s' (bf16 plans keep fp32 gradients: %d bytes for %d trained)" % (grads, d0["bytes"]["grads"], j["plan"]["n_trainable_padded"]))
    if not comm.startswith("Always 0") or any(p["devices"][0]["bytes"]["comm"] for p in [j["plan"]]):
        why.append("comm says '%s'" % comm)
    if why:
        bad("the table's words: " + "; ".join(why))
    else:
        ok("the table shows each category's explanation, its share of the device (to 0.1%%), the CLI's hint; grads say fp32 "
           "(%d bytes = 4 x %d trained, in bf16); comm says it is always 0" % (d0["bytes"]["grads"], j["plan"]["n_trainable_padded"]))

    # the scale toggle: on an 80 GiB card a small category grows when the bars scale to the plan
    h = lambda: b.eval("Math.max(...[...document.querySelectorAll('#bars rect')].map((r) => +r.getAttribute('height')))")
    tallest = h()
    b.eval("gpt2rtPage.set('zoom', true)")
    zoomed = h()
    b.eval("gpt2rtPage.set('zoom', false)")
    if zoomed > tallest * 2:
        ok("'scale to the plan': the tallest category on an 80 GiB card grows from %.0f to %.0f px" % (tallest, zoomed))
    else:
        bad("scale toggle: %.1f px -> %.1f px" % (tallest, zoomed))

    # the timeline: a bar a point, each the JSON's, none over the plan; the PyTorch lines
    for args in ["--model 124M --seq 1024 --batch 8 --gpu rtx3090 --budget 24GiB",
                 "--model 124M --seq 1024 --batch 8 --recompute full --checkpoint-every 3 --classifier-chunk 1024 --gpu rtx3090 --budget 24GiB",
                 "--model 355M --seq 1024 --batch 4 --precision bf16 --recompute selective --devices 2 --mode ddp --shard --gpu h100 --budget 80GiB"]:
        j = page(args)
        tl, plan = j["plan"]["timeline"], j["plan"]["devices"][0]["arenas"]
        got = b.eval("[...document.querySelectorAll('#timeline-chart g')].map((g) => [g.dataset.what, +g.dataset.total])")
        torch = b.eval("document.querySelectorAll('#torch div').length")
        why = []
        if got != [[p["what"], p["total"]] for p in tl]:
            why.append("the chart's points differ from the JSON's")
        if max(p["total"] for p in tl) > plan or text("#v-tl-verdict") != "within":
            why.append("a point over the plan (%d > %d)" % (max(p["total"] for p in tl), plan))
        if len(tl) != 2 * j["plan"]["config"]["layers"] + 3 or torch != len(j["plan"]["torch"]) or torch < 2:
            why.append("%d points, %d PyTorch lines" % (len(tl), torch))
        if why:
            bad("timeline of %s: %s" % (args, "; ".join(why)))
        else:
            ok("timeline of %s: %d points as gpt2rt-mem --json's, peak %s of %d bytes planned, %d PyTorch lines" %
               (args, len(tl), text("#v-tl-peak").replace("\u2009", ""), plan, torch))

    # the compare view: a sweep's plans side by side, its JSON gpt2rt-mem --sweep --json's
    sweep_args = "--model 124M --seq 1024 --batch 32 --gpu rtx3090 --budget 24GiB --sweep accum=1,2,4"
    ref = subprocess.run(["build/web/gpt2rt-mem"] + sweep_args.split() + ["--json"], capture_output=True, text=True).stdout.replace("\n", "")
    b.eval("gpt2rtPage.load(%s)" % json.dumps(sweep_args))
    sj = b.eval("gpt2rtPage.json()")
    cols = b.eval("[...document.querySelectorAll('#compare-body td[data-row=\"device total\"]')].map((t) => t.textContent.replace(/\\u2009/g, ''))")
    want = [str(r["plan"]["devices"][r["plan"]["fullest_device"]]["total"]) for r in json.loads(ref)["sweep"]["rows"]]
    if sj == ref and cols == want:
        ok("compare accum=1,2,4: three columns, each device total gpt2rt-mem --sweep --json's (%s)" % ", ".join(want))
    else:
        bad("compare: page %s, want %s; JSON equal: %s" % (cols, want, sj == ref))
    b.eval("gpt2rtPage.set('sweep', '')")

    # the form's own errors name its fields: a negative classifier chunk is refused, not planned as 0
    page("--model 124M --seq 1024 --batch 8 --gpu rtx3090 --budget 24GiB")
    b.eval("gpt2rtPage.set('chunk', '-5')")
    e1 = text("#error")
    b.eval("gpt2rtPage.set('chunk', '0')")
    b.eval("gpt2rtPage.set('seq', '2000')")
    e2 = text("#error")
    if "'classifier chunk (0: all)' is -5" in e1 and "--" not in e1 and "'sequence length'" in e2 and "--" not in e2 \
            and "seq_len" not in e2:
        ok("the form's errors name its fields: '%s' / '%s'" % (e1, e2))
    else:
        bad("form errors: '%s' / '%s'" % (e1, e2))
    b.eval("gpt2rtPage.set('seq', '1024')")

    # 700 px: one column, nothing wider than the window
    b.send("Emulation.setDeviceMetricsOverride", {"width": 700, "height": 1250, "deviceScaleFactor": 1, "mobile": False})
    time.sleep(0.2)
    page("--model 124M --seq 1024 --batch 16 --devices 2 --gpu h100 --budget 80GiB")
    lay = b.eval("({w: document.documentElement.scrollWidth, cols: getComputedStyle(document.querySelector('main')).gridTemplateColumns.split(' ').length})")
    if lay["w"] <= 700 and lay["cols"] == 1:
        ok("at 700 px the page is one column and %d px wide" % lay["w"])
    else:
        bad("at 700 px: %s" % lay)
    b.send("Emulation.setDeviceMetricsOverride", {"width": 1400, "height": 1250, "deviceScaleFactor": 1, "mobile": False})

    # the screenshot the manual shows: aLLM4TS stage 1 on two 24 GiB cards
    b.eval("document.getElementById('preset-allm4ts').click()")
    time.sleep(0.2)
    png = base64.b64decode(b.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"])
    with open(shot, "wb") as f:
        f.write(png)
    if png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000:
        ok("screenshot of the aLLM4TS stage-1 preset: %s (%d bytes)" % (shot, len(png)))
    else:
        bad("screenshot: %d bytes" % len(png))
except (RuntimeError, OSError, KeyError, TypeError, ValueError) as e:
    bad("the browser session: %s" % e)
finally:
    b.close()
print("WEB: %d passed, %d failed, 0 skipped" % (passed, failed))
sys.exit(1 if failed else 0)

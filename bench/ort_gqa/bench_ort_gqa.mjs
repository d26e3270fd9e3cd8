// ONNX Runtime (CPU EP, onnxruntime-node) benchmark of the GQA + RoPE block: the ORT side of
// `attn bench --shape llama-2k` and of its decode points. Models from make_gqa_models.py.
// Variants: ort_gqa (whole block: x -> Q/K/V MatMuls -> GroupQueryAttention -> out_proj) and
// ort_gqa_core (the GroupQueryAttention node alone, fed q/k/v).
//
//   node bench_ort_gqa.mjs [--shapes llama-2k,decode-4k,decode-4k-mha] [--threads 1,2]
//                          [--variants ort_gqa,ort_gqa_core] [--modes copy,shared] [--quick] [--check-only] [--models DIR] [--tol 1e-4]
//
// Session options as the MHA anchor's bench_ort.mjs (/work/shared/anchors/ort): CPU EP, intra_op = --threads, inter_op 1,
// graph optimization 'all', sequential execution, a fresh session per configuration.
// One correctness run (max abs diff of y against the float64 numpy reference; ok when it is at
// most --tol times max|reference|: the decode outputs are small, ~0.03), 2 warm-ups, then
// session.run() is timed until ~1 s has been spent or 200 reps (at least 5). --quick: no
// warm-up, ~0.25 s, at most 50 reps.
//
// kv_mode of a decode point (one new token against 4095 cached ones):
//   copy   past_key/past_value [b,kv,4095,hd] in; ORT writes a new present [b,kv,4096,hd] (it
//          copies the cache every step).
//   shared one [b,kv,4096,hd] buffer per K and V, fed as past_key and pre-allocated as the
//          present_key output (ORT appends in place when past and present data pointers are
//          equal); `shared_ok` says whether the new token's K really landed in our buffer.
// Prefill points have kv_mode "prompt" (no past).
// Times: median_ms/min_ms are wall time around session.run() in JS, as the MHA anchor reports.
// Sessions also run with ORT's profiler on, and ort_run_*_ms / gqa_*_ms are its own per-run
// times (the 'model_run' event, the GroupQueryAttention kernel) for the same timed runs: in
// 'shared' mode onnxruntime-node spends 4-390 ms per run on the pre-allocated outputs
// outside the session (C++ callers bind them with IoBinding), so there the ORT-side
// figures are the ones to compare.
// One JSON object per line on stdout; progress/errors on stderr.
import fs from 'node:fs';
import path from 'node:path';
import os from 'node:os';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const ort = require('onnxruntime-node');
const HERE = path.dirname(fileURLToPath(import.meta.url));

function parseArgs(argv) {
  const a = { shapes: null, threads: [1, 2], variants: ['ort_gqa', 'ort_gqa_core'], modes: ['copy', 'shared'], quick: false, checkOnly: false,
              models: path.join(HERE, 'models'), tol: 1e-4 };
  for (let i = 0; i < argv.length; i++) {
    const [k, inline] = argv[i].split(/=(.*)/s);
    const val = () => (inline !== undefined ? inline : argv[++i]);
    const list = () => val().split(',').filter(Boolean);
    switch (k) {
      case '--shapes': a.shapes = list(); break;
      case '--threads': a.threads = list().map(Number); break;
      case '--variants': a.variants = list(); break;
      case '--modes': a.modes = list(); break;
      case '--quick': a.quick = true; break;
      case '--check-only': a.checkOnly = true; break;
      case '--models': a.models = path.resolve(val()); break;
      case '--tol': a.tol = Number(val()); break;
      case '-h': case '--help':
        console.error(fs.readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\nimport ')[0]);
        process.exit(0);
      default: throw new Error(`unknown argument ${argv[i]}`);
    }
  }
  return a;
}

function readF32(file) {
  const buf = fs.readFileSync(file);
  return new Float32Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
}

const nowMs = () => Number(process.hrtime.bigint()) / 1e6;
const median = (xs) => {
  const s = [...xs].sort((p, q) => p - q);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : 0.5 * (s[m - 1] + s[m]);
};
const r = (x, n = 4) => (Number.isFinite(x) ? Number(x.toPrecision(n)) : x);

// Feeds (and pre-allocated fetches, for kv_mode 'shared') of one shape.
function makeFeeds(args, vr, mode) {
  const feeds = {};
  let fetches = null;
  const probe = [];
  for (const f of vr.feeds) {
    if (f.dtype === 'int32') { feeds[f.name] = new ort.Tensor('int32', Int32Array.from(f.values), f.dims); continue; }
    const data = readF32(path.join(args.models, f.file));
    if (mode !== 'shared' || !f.name.startsWith('past_')) { feeds[f.name] = new ort.Tensor('float32', data, f.dims); continue; }
    // [b,kv,P,hd] -> [b,kv,P+1,hd] with the last slot of every head free (zero)
    const [b, kv, P, hd] = f.dims;
    const buf = new Float32Array(b * kv * (P + 1) * hd);
    for (let i = 0; i < b * kv; i++) buf.set(data.subarray(i * P * hd, (i + 1) * P * hd), i * (P + 1) * hd);
    const t = new ort.Tensor('float32', buf, [b, kv, P + 1, hd]);
    feeds[f.name] = t;
    fetches ??= { [vr.output]: null };
    fetches[f.name.replace('past_', 'present_')] = t;
    probe.push({ buf, slot: P, stride: (P + 1) * hd, hd, heads: b * kv });
  }
  return { feeds, fetches, probe };
}

// ORT's own times of the last n runs, from its profile (then deleted).
function readProfile(session, prefix, n) {
  session.endProfiling();
  const dir = path.dirname(prefix);
  const files = fs.readdirSync(dir).filter((f) => path.join(dir, f).startsWith(prefix));
  if (files.length !== 1) return { profile_error: `${files.length} profile files for ${prefix}` };
  const file = path.join(dir, files[0]);
  const events = JSON.parse(fs.readFileSync(file, 'utf8'));
  fs.unlinkSync(file);
  const pick = (pred) => events.filter(pred).map((e) => e.dur / 1e3).slice(-n);
  const run = pick((e) => e.cat === 'Session' && e.name === 'model_run');
  const gqa = pick((e) => e.cat === 'Node' && e.name === 'gqa_kernel_time');
  return { ort_run_median_ms: r(median(run)), ort_run_min_ms: r(Math.min(...run)),
           gqa_median_ms: r(median(gqa)), gqa_min_ms: r(Math.min(...gqa)) };
}

async function benchOne(args, name, sh, variant, mode, threads, expected) {
  const vr = sh.variants[variant];
  const base = { shape: name, variant, kv_mode: mode, threads, b: sh.b, S: sh.S, context: sh.context,
                 d: sh.d, heads: sh.heads, kv_heads: sh.kv_heads, head_dim: sh.head_dim };
  const profPrefix = path.join(os.tmpdir(), `ort_gqa_prof_${process.pid}_${name}_${variant}_${mode}_${threads}`);
  const opts = { executionProviders: ['cpu'], intraOpNumThreads: threads, interOpNumThreads: 1,
                 graphOptimizationLevel: 'all', executionMode: 'sequential',
                 enableProfiling: !args.checkOnly, profileFilePrefix: profPrefix };
  let session;
  const t0 = nowMs();
  try {
    session = await ort.InferenceSession.create(path.join(args.models, vr.model), opts);
  } catch (e) {
    return { ...base, error: `session create failed: ${String(e.message || e).split('\n')[0]}` };
  }
  const sessionMs = nowMs() - t0;
  const { feeds, fetches, probe } = makeFeeds(args, vr, mode);
  const run = () => (fetches ? session.run(feeds, fetches) : session.run(feeds, [vr.output]));

  let out, firstRunMs;
  const tRun = nowMs();
  try {
    out = (await run())[vr.output];
    firstRunMs = nowMs() - tRun;
  } catch (e) {
    await session.release();
    return { ...base, error: `run failed: ${String(e.message || e).split('\n')[0]}` };
  }
  let maxAbs = out.data.length === expected.length ? 0 : Infinity;
  for (let i = 0; i < expected.length && maxAbs !== Infinity; i++) {
    const dlt = Math.abs(out.data[i] - expected[i]);
    if (!(dlt <= maxAbs)) maxAbs = Number.isNaN(dlt) ? NaN : dlt;
    if (Number.isNaN(maxAbs)) break;
  }
  let maxRef = 0;
  for (let i = 0; i < expected.length; i++) maxRef = Math.max(maxRef, Math.abs(expected[i]));
  const extra = { rel_err: r(maxAbs / maxRef, 3) };
  if (mode === 'shared') {  // did the new token's K/V land in the last slot of our buffers?
    extra.shared_ok = probe.every(({ buf, slot, stride, hd, heads }) => {
      for (let h = 0; h < heads; h++) if (buf.subarray(h * stride + slot * hd, h * stride + (slot + 1) * hd).every((v) => v === 0)) return false;
      return true;
    });
  }
  const ok = maxAbs <= args.tol * maxRef && extra.shared_ok !== false;
  if (args.checkOnly) {
    await session.release();
    return { ...base, check_only: true, max_abs_diff: maxAbs, ok, ...extra, session_ms: r(sessionMs),
             first_run_ms: r(firstRunMs), ort: ort.env.versions.node };
  }
  for (let i = 0; i < (args.quick ? 0 : 2); i++) await run();
  const budgetMs = args.quick ? 250 : 1000, maxReps = args.quick ? 50 : 200, minReps = 5;
  const times = [];
  const tStart = nowMs();
  while (times.length < minReps || (times.length < maxReps && nowMs() - tStart < budgetMs)) {
    const s = nowMs();
    await run();
    times.push(nowMs() - s);
  }
  const prof = readProfile(session, profPrefix, times.length);
  await session.release();
  const med = median(times);
  return {
    ...base, min_ms: r(Math.min(...times)), median_ms: r(med), runs: times.length,
    gflops: r(vr.flops / (med / 1e3) / 1e9),
    ...(sh.kind === 'decode' ? { kv_gbps: r(sh.kv_cache_bytes / (med / 1e3) / 1e9) }
                             : { tokens_per_s: r((sh.b * sh.S) / (med / 1e3)) }),
    ...prof, max_abs_diff: maxAbs, ok, ...extra, session_ms: r(sessionMs), flops: vr.flops, ort: ort.env.versions.node,
  };
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const manPath = path.join(args.models, 'manifest.json');
  if (!fs.existsSync(manPath)) throw new Error(`${manPath} missing: run /usr/bin/python3 make_gqa_models.py first`);
  const man = JSON.parse(fs.readFileSync(manPath, 'utf8'));
  const shapes = args.shapes ?? Object.keys(man.shapes);
  console.error(`# onnxruntime-node ${ort.env.versions.node}, ${os.cpus().length} cpus (${os.cpus()[0]?.model}), ` +
                `shapes=${shapes} threads=${args.threads} modes=${args.modes} quick=${args.quick} check_only=${args.checkOnly}`);
  let bad = 0;
  for (const name of shapes) {
    const sh = man.shapes[name];
    if (!sh) throw new Error(`shape ${name} not in ${manPath}; run make_gqa_models.py --shapes ${name}`);
    for (const variant of args.variants.filter((v) => sh.variants[v])) {
      const expected = readF32(path.join(args.models, sh.variants[variant].expected));
      for (const mode of sh.kind === 'decode' ? args.modes : ['prompt']) {
        for (const threads of args.threads) {
          const res = await benchOne(args, name, sh, variant, mode, threads, expected);
          if (res.error || !res.ok) bad++;
          console.log(JSON.stringify(res));
        }
      }
    }
  }
  if (bad) {
    console.error(`# ${bad} configuration(s) failed or exceeded tol ${args.tol} (relative to max|reference|)`);
    process.exitCode = 1;
  }
}

main().catch((e) => { console.error(e); process.exit(2); });

// ONNX Runtime (the npm package onnxruntime-node, CPU) for bench/vs_onnxruntime/run.py: one JSON
// command per stdin line, one JSON answer per stdout line, sessions kept between commands.
//   {"cmd": "load", "name": N, "model": PATH, "threads": T}        -> {"ok": true, "version": V}
//   {"cmd": "input", "name": N, "path": X.f32, "dims": [..]}       -> {"ok": true}  (raw float32, input "x")
//   {"cmd": "run", "name": N, "out": PREFIX}  -> writes PREFIX.<output>.f32 -> {"ok": true, "outputs": {name: dims}}
//   {"cmd": "time", "name": N, "reps": R}     -> {"ok": true, "best_s": S, "times_s": [..]} (after one warm-up)
// Threads: intraOpNumThreads = T, interOpNumThreads = 1, sequential execution, all graph optimizations.
'use strict';
const fs = require('fs');
const readline = require('readline');
const ort = require('onnxruntime-node');

const sessions = {};
const feeds = {};

async function handle(c) {
  if (c.cmd === 'load') {
    sessions[c.name] = await ort.InferenceSession.create(c.model, {
      intraOpNumThreads: c.threads, interOpNumThreads: 1, executionMode: 'sequential',
      graphOptimizationLevel: 'all', executionProviders: ['cpu'],
    });
    return {version: require('onnxruntime-node/package.json').version};
  }
  if (c.cmd === 'input') {
    const buf = fs.readFileSync(c.path);
    const data = new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4);
    feeds[c.name] = {x: new ort.Tensor('float32', Float32Array.from(data), c.dims)};
    return {};
  }
  const s = sessions[c.name];
  if (!s || !feeds[c.name]) throw new Error(`no session or input for ${c.name}`);
  if (c.cmd === 'run') {
    const out = await s.run(feeds[c.name]);
    const dims = {};
    for (const [k, v] of Object.entries(out)) {
      fs.writeFileSync(`${c.out}.${k}.f32`, Buffer.from(v.data.buffer, v.data.byteOffset, v.data.byteLength));
      dims[k] = v.dims;
    }
    return {outputs: dims};
  }
  if (c.cmd === 'time') {
    await s.run(feeds[c.name]);  // warm-up
    const t = [];
    for (let r = 0; r < c.reps; ++r) {
      const t0 = process.hrtime.bigint();
      await s.run(feeds[c.name]);
      t.push(Number(process.hrtime.bigint() - t0) * 1e-9);
    }
    return {best_s: Math.min(...t), times_s: t};
  }
  throw new Error(`unknown command ${c.cmd}`);
}

const rl = readline.createInterface({input: process.stdin});
let chain = Promise.resolve();
rl.on('line', (line) => {
  chain = chain.then(async () => {
    let answer;
    try {
      answer = Object.assign({ok: true}, await handle(JSON.parse(line)));
    } catch (e) {
      answer = {ok: false, error: String(e && e.message || e)};
    }
    process.stdout.write(JSON.stringify(answer) + '\n');
  });
});

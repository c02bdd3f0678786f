// Runs an ONNX model on ONNX Runtime (onnxruntime-node, CPU) as the outside
// reference for the engine's model tests: inputs and outputs are NumPy
// .npy files (float32 or int64, C order).
//
//   node ort_run.js MODEL.onnx IN_NAME=in.npy ... -- OUT_NAME=out.npy ...
//
// NODE_PATH (or KP_ORT_DIR/node_modules) must reach onnxruntime-node.
'use strict';
const fs = require('fs');
const path = require('path');

function loadOrt() {
  const dirs = [process.env.KP_ORT_DIR && path.join(process.env.KP_ORT_DIR, 'node_modules')];
  for (const d of dirs.filter(Boolean)) {
    try { return require(path.join(d, 'onnxruntime-node')); } catch (e) { /* next */ }
  }
  return require('onnxruntime-node');
}

const TYPES = {'<f4': ['float32', Float32Array], '<i8': ['int64', BigInt64Array]};

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString('latin1', 1, 6) !== 'NUMPY') throw new Error(file + ': not a .npy file');
  const major = buf[6];
  const hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', start, start + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').filter(s => s.trim())
      .map(s => parseInt(s, 10));
  if (/'fortran_order':\s*True/.test(header)) throw new Error(file + ': Fortran order');
  const t = TYPES[descr];
  if (!t) throw new Error(file + ': dtype ' + descr + ' not handled');
  const body = buf.subarray(start + hlen);
  const data = new t[1](body.buffer.slice(body.byteOffset, body.byteOffset + body.length));
  return {type: t[0], data, shape};
}

function writeNpy(file, tensor) {
  const descr = Object.keys(TYPES).find(k => TYPES[k][0] === tensor.type);
  if (!descr) throw new Error('output type ' + tensor.type + ' not handled');
  const dims = tensor.dims.length === 1 ? tensor.dims[0] + ',' : tensor.dims.join(', ');
  let header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + '), }';
  const pad = 64 - ((10 + header.length + 1) % 64);
  header += ' '.repeat(pad % 64) + '\n';
  const head = Buffer.alloc(10);
  head.write('\x93NUMPY', 0, 'latin1');
  head[6] = 1;
  head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  const data = Buffer.from(tensor.data.buffer, tensor.data.byteOffset, tensor.data.byteLength);
  fs.writeFileSync(file, Buffer.concat([head, Buffer.from(header, 'latin1'), data]));
}

async function main() {
  const args = process.argv.slice(2);
  const ort = loadOrt();
  const sep = args.indexOf('--');
  const model = args[0];
  const ins = args.slice(1, sep < 0 ? args.length : sep);
  const outs = sep < 0 ? [] : args.slice(sep + 1);
  const session = await ort.InferenceSession.create(model, {graphOptimizationLevel: 'disabled'});
  const feeds = {};
  for (const a of ins) {
    const [name, file] = a.split('=');
    const t = readNpy(file);
    feeds[name] = new ort.Tensor(t.type, t.data, t.shape);
  }
  const result = await session.run(feeds);
  for (const a of outs) {
    const [name, file] = a.split('=');
    if (!result[name]) throw new Error('no output ' + name);
    writeNpy(file, result[name]);
  }
}

main().catch(e => { console.error(String(e && e.stack || e)); process.exit(1); });

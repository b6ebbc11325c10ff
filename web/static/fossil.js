// Fossil deltas for the Switchyard JavaScript client.
//
// A subscription made with `delta: "fossil"` receives, after a full message
// of a (topic, partition), messages marked `"delta": true` whose `data` is
// the Fossil delta of the payload against the previous payload of that
// partition: a string of the delta's text, or its standard base64 with
// `"encoding": "base64"` when the delta's bytes are not UTF-8 text. The
// client applies them here before the handler sees the message, so
// handlers always get the whole `data`.
//
// The format (as the Fossil version-control system defines it): the
// output's size, then commands, every number written in a base-64 alphabet
// of its own ("0-9A-Z_a-z~", most significant digit first):
//   N "\n"          the output is N bytes
//   N "@" O ","     copy N bytes of the origin from offset O
//   N ":" bytes     insert the N bytes that follow
//   N ";"           end; N is the output's checksum (the sum of its bytes
//                   read as big-endian 32-bit words, zero padded, mod 2^32)

const DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~";
const VALUE = new Int8Array(256).fill(-1);
for (let i = 0; i < DIGITS.length; i++) VALUE[DIGITS.charCodeAt(i)] = i;

/** Reads a number at i; returns [value, index after it]. */
function readInt(d, i) {
  let v = 0;
  let n = 0;
  for (; i < d.length && VALUE[d[i]] >= 0; i++, n++) {
    if (n >= 6) throw new Error("fossil: number too long");
    v = v * 64 + VALUE[d[i]];
  }
  if (v > 0xffffffff) throw new Error("fossil: number too large");
  return [v, i];
}

/** The checksum of bytes b (see the file comment). */
export function checksum(b) {
  let sum = 0;
  const n = b.length;
  let i = 0;
  for (; i + 4 <= n; i += 4) sum = (sum + ((b[i] << 24) >>> 0) + (b[i + 1] << 16) + (b[i + 2] << 8) + b[i + 3]) >>> 0;
  let tail = 0;
  for (let s = 24; i < n; i++, s -= 8) tail += (b[i] << s) >>> 0;
  return (sum + tail) >>> 0;
}

/**
 * The largest output a delta may claim unless the client says otherwise
 * (connect's `maxDeltaBytes`): 64 MiB, the most a record can hold on NATS
 * (its largest `max_payload`) and the gateway's default bound on the
 * payloads it keeps as delta bases (`--delta-max-base-bytes`).
 */
export const MAX_DELTA_OUTPUT_BYTES = 64 << 20;

/**
 * Applies a Fossil delta to origin and returns the output. Throws an Error
 * on a malformed delta, one that reads past the origin, or whose checksum
 * does not match (a delta against another origin).
 *
 * The output's size, which the delta claims in its first line, is checked
 * before the output is allocated: more than limit bytes, or more than the
 * delta's commands could make from origin (each copy of at most
 * origin.length bytes takes at least 4 of the delta's bytes), is refused.
 *
 * @param {Uint8Array} origin
 * @param {Uint8Array} delta
 * @param {number} [limit=MAX_DELTA_OUTPUT_BYTES] the largest output accepted
 * @returns {Uint8Array}
 */
export function applyDelta(origin, delta, limit = MAX_DELTA_OUTPUT_BYTES) {
  let [size, i] = readInt(delta, 0);
  if (delta[i] !== 0x0a) throw new Error("fossil: size not terminated by a newline");
  i++;
  if (size > limit) throw new Error(`fossil: the delta claims an output of ${size} bytes, more than the limit of ${limit}`);
  const possible = origin.length * Math.floor((delta.length - i) / 4) + (delta.length - i);
  if (size > possible) throw new Error(`fossil: the delta claims an output of ${size} bytes, more than its ${delta.length} bytes can make from an origin of ${origin.length}`);
  const out = new Uint8Array(size);
  let n = 0;
  while (i < delta.length) {
    const [cnt, j] = readInt(delta, i);
    if (j >= delta.length) break;
    const op = delta[j];
    i = j + 1;
    if (op === 0x40) {
      // '@': copy
      const [ofst, k] = readInt(delta, i);
      if (delta[k] !== 0x2c) throw new Error("fossil: copy not terminated by a comma");
      i = k + 1;
      if (n + cnt > size) throw new Error("fossil: copy exceeds the output size");
      if (ofst + cnt > origin.length) throw new Error("fossil: copy past the end of the origin");
      out.set(origin.subarray(ofst, ofst + cnt), n);
      n += cnt;
    } else if (op === 0x3a) {
      // ':': insert
      if (n + cnt > size) throw new Error("fossil: insert exceeds the output size");
      if (i + cnt > delta.length) throw new Error("fossil: insert past the end of the delta");
      out.set(delta.subarray(i, i + cnt), n);
      n += cnt;
      i += cnt;
    } else if (op === 0x3b) {
      // ';': end
      if (n !== size) throw new Error("fossil: output size mismatch");
      if (checksum(out) !== cnt) throw new Error("fossil: checksum mismatch");
      return out;
    } else {
      throw new Error("fossil: unknown command");
    }
  }
  throw new Error("fossil: unterminated delta");
}

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });

/** Decodes standard base64 to bytes. */
function fromBase64(s) {
  const bin = atob(s);
  const b = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) b[i] = bin.charCodeAt(i);
  return b;
}

/** Skips JSON whitespace in s from i. */
function ws(s, i) {
  while (i < s.length && (s[i] === " " || s[i] === "\t" || s[i] === "\n" || s[i] === "\r")) i++;
  return i;
}

/** Returns the index after the JSON string starting at s[i] ('"'). */
function skipString(s, i) {
  for (i++; i < s.length; i++) {
    if (s[i] === "\\") i++;
    else if (s[i] === '"') return i + 1;
  }
  throw new Error("fossil: unterminated string in frame");
}

/** Returns the index after the JSON value starting at s[i]. */
function skipValue(s, i) {
  if (s[i] === '"') return skipString(s, i);
  if (s[i] === "{" || s[i] === "[") {
    let depth = 0;
    for (; i < s.length; ) {
      const c = s[i];
      if (c === '"') {
        i = skipString(s, i);
        continue;
      }
      if (c === "{" || c === "[") depth++;
      else if (c === "}" || c === "]") {
        depth--;
        if (depth === 0) return i + 1;
      }
      i++;
    }
    throw new Error("fossil: unterminated value in frame");
  }
  while (i < s.length && s[i] !== "," && s[i] !== "}" && s[i] !== "]" && s[i] !== " " && s[i] !== "\n") i++;
  return i;
}

/**
 * Returns the text of the top-level "data" member of the JSON object in
 * line, exactly as written (the bytes a delta applies to), or undefined.
 *
 * @param {string} line one server frame
 * @returns {string|undefined}
 */
export function dataText(line) {
  let i = ws(line, 0);
  if (line[i] !== "{") return undefined;
  i = ws(line, i + 1);
  while (i < line.length && line[i] === '"') {
    const end = skipString(line, i);
    const key = JSON.parse(line.slice(i, end));
    i = ws(line, end);
    if (line[i] !== ":") return undefined;
    i = ws(line, i + 1);
    const vEnd = skipValue(line, i);
    if (key === "data") return line.slice(i, vEnd);
    i = ws(line, vEnd);
    if (line[i] !== ",") return undefined;
    i = ws(line, i + 1);
  }
  return undefined;
}

// The text of each message frame, kept while it is handled (keepText).
const texts = new WeakMap();

/**
 * Remembers the text of a parsed message frame, for the payload a later
 * delta applies to. Returns f.
 *
 * @param {object} f the parsed frame
 * @param {string} line its text
 */
export function keepText(f, line) {
  if (f !== null && typeof f === "object" && f.op === "message") texts.set(f, line);
  return f;
}

/** The key of a (topic, partition). */
function part(m) {
  return m.topic + "\u0000" + m.partition;
}

/**
 * Forgets the payload of a gap's (topic, partition): the server's next
 * message of it is full.
 *
 * @param {Map<string, Uint8Array>} bases
 * @param {{topic: string, partition: number}} g
 */
export function forgetPart(bases, g) {
  bases.delete(part(g));
}

/**
 * Takes message m of a delta subscription whose payloads per partition are
 * kept in bases (a Map): a full message is kept and returned as is; a
 * delta is applied to the partition's last payload and the message is
 * returned with the whole `data` (and without `delta` and `encoding`).
 * Throws an Error for a delta without its base or one that does not apply.
 *
 * @param {Map<string, Uint8Array>} bases
 * @param {object} m a message frame
 * @param {number} [limit=MAX_DELTA_OUTPUT_BYTES] the largest payload a delta may claim
 * @returns {object}
 */
export function takeMessage(bases, m, limit = MAX_DELTA_OUTPUT_BYTES) {
  const k = part(m);
  if (m.delta !== true) {
    if (m.encoding === "base64") {
      bases.delete(k); // bytes are never a base
      return m;
    }
    const text = texts.get(m);
    const raw = text === undefined ? undefined : dataText(text);
    bases.set(k, encoder.encode(raw === undefined ? JSON.stringify(m.data) : raw));
    return m;
  }
  const base = bases.get(k);
  if (base === undefined) {
    throw new Error(`delta message of ${m.topic}/${m.partition} at offset ${m.offset} without the message before it`);
  }
  if (typeof m.data !== "string") throw new Error("delta data is not a string");
  let out;
  try {
    out = applyDelta(base, m.encoding === "base64" ? fromBase64(m.data) : encoder.encode(m.data), limit);
  } catch (err) {
    bases.delete(k);
    throw err;
  }
  bases.set(k, out);
  const { delta: _d, encoding: _e, ...rest } = m;
  return { ...rest, data: JSON.parse(decoder.decode(out)) };
}

// Trust receipt, chain, inclusion-proof and checkpoint verification for the browser.
//
// The rules are the ones every Sonate verifier implements (docs/architecture.md "Trust receipts",
// proxy/receipts/receipt.py and verify.py): RFC 8785 canonical JSON, SHA-256 references
// "sha256:<hex>", Ed25519 (RFC 8032) over the canonical receipt without ed25519_sig, the key's
// validity window (not_after by ts, not_before_height by ledger height), the
// prev_hash chain from the genesis hash, RFC 9162 §2.1 Merkle inclusion and consistency proofs
// and C2SP tlog-checkpoint signed notes. No DOM and no network: verify.js is the page around it.
//
// Requires a secure context (https:, or http://localhost / 127.0.0.1) for crypto.subtle.

import canonicalize from './vendor/canonicalize.js';
import * as noble from './vendor/noble-ed25519.js';

export const GENESIS_PREV_HASH = 'sha256:' + '0'.repeat(64);
export const RECEIPT_VERSION = 1;
export const MAX_SAFE_INTEGER = Number.MAX_SAFE_INTEGER; // 2^53 - 1 (RFC 7493 §2.2)
export const RECEIPT_FIELDS = Object.freeze([
  'v', 'receipt_id', 'request_id', 'ts', 'actor', 'intent', 'inputs_hash', 'outputs_hash',
  'policy_id', 'guardrail_action', 'evidence', 'model', 'provider', 'stratum', 'key_id',
  'ledger_height', 'prev_hash', 'ed25519_sig',
]);
/** Fields a receipt may carry beyond RECEIPT_FIELDS: `ledger` (its ledger's name, partitioned deployments). */
export const OPTIONAL_FIELDS = Object.freeze(['ledger']);

/** Check identifiers, in display order, with a human label. Names equal the Python verifier's. */
export const CHECK_LABELS = Object.freeze({
  input: 'Document is JSON of a known kind',
  keys: 'Trusted public keys are well-formed',
  schema: 'Receipt fields and formats (no floats)',
  unknown_key: 'Receipt key_id is a trusted key',
  signature: 'Ed25519 receipt signature',
  key_window: 'Receipt inside its key\u2019s validity window',
  genesis: 'Genesis rule (height 0 ⇔ zero prev_hash)',
  prev_hash: 'prev_hash links to the previous receipt',
  height: 'Heights are contiguous and in order',
  duplicate: 'One receipt per height and receipt_id',
  bundle: 'Bundle structure',
  public_keys: 'Bundle public_keys are well-formed',
  checkpoint: 'Checkpoint note format (C2SP)',
  checkpoint_signature: 'Checkpoint signed by a trusted key',
  inclusion: 'Merkle inclusion proof (RFC 9162)',
  consistency: 'Merkle consistency proof (RFC 9162 §2.1.4)',
  trusted_checkpoint: 'Saved checkpoint note format (C2SP)',
  trusted_checkpoint_signature: 'Saved checkpoint signed by a trusted key',
  current_checkpoint: 'Current checkpoint from the server (C2SP)',
  current_checkpoint_signature: 'Current checkpoint signed by a trusted key',
  truncated: 'The ledger still holds every entry of the saved checkpoint',
});

const L = 0x1000000000000000000000000000000014def9dea2f79cd65812631a5cf5d3edn; // Ed25519 group order
const RE = {
  hash: /^sha256:[0-9a-f]{64}$/,
  receiptId: /^rcpt_[0-9a-f]{32}$/,
  keyId: /^ed25519:[0-9a-f]{16}$/,
  sig: /^[A-Za-z0-9_-]{85}[AQgw]$/, // 64 bytes, canonical unpadded base64url
  ts: /^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})\.[0-9]{3}Z$/,
  b64url: /^[A-Za-z0-9_-]*$/,
  b64: /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/,
  integerLexeme: /^-?(0|[1-9][0-9]*)$/,
};
const enc = new TextEncoder();

// ---------------------------------------------------------------------------------------------
// Bytes, base64 and hashes

/** A verification input problem (bad key document, bad base64...): message says what and where. */
export class InputError extends Error {}

function subtle() {
  if (!globalThis.crypto || !globalThis.crypto.subtle) {
    throw new InputError('This page needs WebCrypto (crypto.subtle), which browsers only offer in a secure ' +
      'context: open it over https:// or from http://localhost.');
  }
  return globalThis.crypto.subtle;
}

export function toHex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

function binaryToBytes(binary) {
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
  return out;
}

function bytesToBinary(bytes) {
  let s = '';
  for (const b of bytes) s += String.fromCharCode(b);
  return s;
}

export function b64Encode(bytes) {
  return btoa(bytesToBinary(bytes));
}

export function b64urlEncode(bytes) {
  return b64Encode(bytes).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/** Strict unpadded base64url (RFC 4648 §5): one valid text per byte string, as signing.py. */
export function b64urlDecode(text) {
  if (typeof text !== 'string' || !RE.b64url.test(text) || text.length % 4 === 1) {
    throw new InputError('not unpadded base64url');
  }
  const padded = text.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (text.length % 4)) % 4);
  const bytes = binaryToBytes(atob(padded));
  if (b64urlEncode(bytes) !== text) throw new InputError('non-canonical base64url (trailing bits set)');
  return bytes;
}

/** Strict standard padded base64 (RFC 4648 §4), as used by RFC 9162 proofs and C2SP notes. */
export function b64Decode(text) {
  if (typeof text !== 'string' || !RE.b64.test(text)) throw new InputError('not padded base64');
  const bytes = binaryToBytes(atob(text));
  if (b64Encode(bytes) !== text) throw new InputError('non-canonical base64 (trailing bits set)');
  return bytes;
}

export async function sha256(bytes) {
  return new Uint8Array(await subtle().digest('SHA-256', bytes));
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const p of parts) {
    out.set(p, offset);
    offset += p.length;
  }
  return out;
}

function equalBytes(a, b) {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i] ^ b[i];
  return diff === 0;
}

// ---------------------------------------------------------------------------------------------
// JSON that remembers which numbers were not integers

/** A JSON number written with a fraction or exponent; canonicalizes as the number (toJSON). */
export class JsonFloat {
  constructor(value, source) {
    this.value = value;
    this.source = source;
  }
  toJSON() {
    return this.value;
  }
}

let sourceTextSupported = null;
function reviverHasSource() {
  if (sourceTextSupported === null) {
    let seen = false;
    JSON.parse('[1]', (k, v, context) => {
      if (context && typeof context.source === 'string') seen = true;
      return v;
    });
    sourceTextSupported = seen;
  }
  return sourceTextSupported;
}

/** Whether any number token in the JSON text has a fraction or exponent (strings skipped). */
function textHasNonIntegerNumber(text) {
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') {
      inString = true;
    } else if (c === '-' || (c >= '0' && c <= '9')) {
      const token = /^-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(text.slice(i, i + 400))[0];
      if (/[.eE]/.test(token)) return true;
      i += token.length - 1;
    }
  }
  return false;
}

/**
 * Parse JSON text like JSON.parse, wrapping numbers written with a fraction or exponent in
 * JsonFloat (Python's json reads those as float, which signed content must not hold).
 * Browsers without JSON.parse source text access get {floatsSomewhere: true} instead.
 * Throws InputError for text that is not JSON.
 */
export function parseJson(text) {
  let value;
  try {
    if (reviverHasSource()) {
      value = JSON.parse(text, (key, v, context) =>
        typeof v === 'number' && !RE.integerLexeme.test(context.source) ? new JsonFloat(v, context.source) : v);
      return { value, floatsSomewhere: false };
    }
    value = JSON.parse(text);
  } catch (err) {
    throw new InputError(`not JSON: ${err.message}`);
  }
  return { value, floatsSomewhere: textHasNonIntegerNumber(text) };
}

/** RFC 8785 canonical bytes; throws for values JCS cannot represent (lone surrogates...). */
export function canonicalBytes(value) {
  return enc.encode(canonicalize(value));
}

function isPlainObject(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v) && !(v instanceof JsonFloat);
}

function isInt(v) {
  return typeof v === 'number' && Number.isInteger(v);
}

function childPath(path, key) {
  return /^[A-Za-z_][A-Za-z0-9_]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

/** The JSONPath-like path of the first float or unsafe integer in v, or null. */
function firstFloat(v, path = '$') {
  if (v instanceof JsonFloat) return `float at ${path} (${v.source}): signed content must use decimal strings`;
  if (typeof v === 'number' && !Number.isSafeInteger(v)) return `integer at ${path} exceeds ±(2**53-1)`;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      const found = firstFloat(v[i], `${path}[${i}]`);
      if (found) return found;
    }
  } else if (isPlainObject(v)) {
    for (const key of Object.keys(v)) {
      const found = firstFloat(v[key], childPath(path, key));
      if (found) return found;
    }
  }
  return null;
}

// ---------------------------------------------------------------------------------------------
// Receipt schema (proxy/receipts/receipt.py schema_problems)

function validTs(v) {
  const m = typeof v === 'string' && RE.ts.exec(v);
  if (!m) return false;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number);
  if (year < 1 || month < 1 || month > 12 || hour > 23 || minute > 59 || second > 59) return false;
  const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
  const days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1];
  return day >= 1 && day <= days;
}

const nonEmpty = (v) => typeof v === 'string' && v !== '';
const optStr = (v) => v === null || typeof v === 'string';
const matches = (re) => (v) => typeof v === 'string' && re.test(v);
const FIELD_RULES = {
  v: [(v) => isInt(v) && v === RECEIPT_VERSION, `must be the integer ${RECEIPT_VERSION}`],
  receipt_id: [matches(RE.receiptId), 'must be rcpt_ + 32 lowercase hex'],
  request_id: [nonEmpty, 'must be a non-empty string'],
  ts: [validTs, 'must be RFC 3339 UTC with milliseconds, e.g. 2026-11-22T03:04:05.123Z'],
  actor: [nonEmpty, 'must be a non-empty string'],
  intent: [optStr, 'must be a string or null'],
  inputs_hash: [matches(RE.hash), 'must be sha256: + 64 lowercase hex'],
  outputs_hash: [matches(RE.hash), 'must be sha256: + 64 lowercase hex'],
  policy_id: [optStr, 'must be a string or null'],
  guardrail_action: [nonEmpty, 'must be a non-empty string'],
  evidence: [isPlainObject, 'must be an object'],
  model: [optStr, 'must be a string or null'],
  provider: [optStr, 'must be a string or null'],
  stratum: [isPlainObject, 'must be an object'],
  key_id: [matches(RE.keyId), 'must be ed25519: + 16 lowercase hex'],
  ledger_height: [(v) => isInt(v) && v >= 0 && v <= MAX_SAFE_INTEGER, 'must be an integer >= 0'],
  prev_hash: [matches(RE.hash), 'must be sha256: + 64 lowercase hex'],
  ed25519_sig: [matches(RE.sig), 'must be 64 bytes as unpadded base64url'],
  ledger: [(v) => typeof v === 'string' && /^[A-Za-z0-9_.-]{1,64}$/.test(v), "must be 1-64 of letters, digits, '_', '.' or '-'"],
};

function shortRepr(v) {
  let s;
  try {
    s = JSON.stringify(v);
  } catch {
    s = String(v);
  }
  s = s === undefined ? String(v) : s;
  return s.length > 80 ? s.slice(0, 77) + '...' : s;
}

/** [[field, problem], ...] for a receipt: exactly RECEIPT_FIELDS, each well-formed, no floats. */
export function schemaProblems(receipt, floatsSomewhere = false) {
  if (!isPlainObject(receipt)) return [['$', 'receipt must be a JSON object']];
  const problems = [];
  for (const name of RECEIPT_FIELDS) {
    if (!Object.prototype.hasOwnProperty.call(receipt, name)) {
      problems.push([name, 'missing']);
      continue;
    }
    const [check, message] = FIELD_RULES[name];
    if (!check(receipt[name])) problems.push([name, `${message}, got ${shortRepr(receipt[name])}`]);
  }
  for (const name of OPTIONAL_FIELDS) {
    if (Object.prototype.hasOwnProperty.call(receipt, name) && !FIELD_RULES[name][0](receipt[name])) {
      problems.push([name, `${FIELD_RULES[name][1]}, got ${shortRepr(receipt[name])}`]);
    }
  }
  for (const name of Object.keys(receipt)) {
    if (!RECEIPT_FIELDS.includes(name) && !OPTIONAL_FIELDS.includes(name)) problems.push([name, 'unexpected field']);
  }
  const float = firstFloat(receipt) ||
    (floatsSomewhere ? 'a number with a fraction or exponent appears in the document' : null);
  if (float) problems.push(['$', float]);
  return problems;
}

/** sha256 reference "sha256:<hex>" of the canonical full receipt (signature included). */
export async function entryHash(receipt) {
  return 'sha256:' + toHex(await sha256(canonicalBytes(receipt)));
}

async function entryHashOrNull(receipt) {
  try {
    return await entryHash(receipt);
  } catch {
    return null;
  }
}

/** canonical(receipt without ed25519_sig): the bytes the receipt signature covers. */
export function signingPayload(receipt) {
  const body = {};
  for (const key of Object.keys(receipt)) if (key !== 'ed25519_sig') body[key] = receipt[key];
  return canonicalBytes(body);
}

// ---------------------------------------------------------------------------------------------
// Public keys (proxy/receipts/signing.py load_public_keys)

export async function keyIdFor(publicKey) {
  return 'ed25519:' + toHex(await sha256(publicKey)).slice(0, 16);
}

/**
 * Map key_id -> {publicKey: Uint8Array(32), entry} from a GET /v1/keys document
 * {"keys": [...]}, one entry, or a list of entries. Every key_id is checked against its key.
 * Throws InputError naming the problem. Private key files are refused: paste public keys only.
 */
export async function loadPublicKeys(doc) {
  let entries;
  if (isPlainObject(doc) && 'keys' in doc) {
    entries = doc.keys;
    if (!Array.isArray(entries)) throw new InputError('"keys" must be a list');
  } else if (Array.isArray(doc)) {
    entries = doc;
  } else {
    entries = [doc];
  }
  const keys = new Map();
  for (const [i, entry] of entries.entries()) {
    const where = `key ${i + 1}`;
    if (!isPlainObject(entry)) throw new InputError(`${where}: key entry is not an object`);
    if ('private_key' in entry) {
      throw new InputError(`${where}: this is a private signing key file; paste the public key entry ` +
        '(GET /v1/keys) instead — a private key never belongs in a browser');
    }
    if (entry.alg !== 'Ed25519') throw new InputError(`${where}: unsupported alg ${shortRepr(entry.alg)}`);
    let publicKey;
    try {
      publicKey = b64urlDecode(entry.public_key);
    } catch (err) {
      throw new InputError(`${where}: bad public_key (${err.message})`);
    }
    if (publicKey.length !== 32) throw new InputError(`${where}: public_key must be 32 bytes`);
    const keyId = await keyIdFor(publicKey);
    if ('key_id' in entry && entry.key_id !== keyId) {
      throw new InputError(`${where}: key_id ${shortRepr(entry.key_id)} does not match public_key (${keyId})`);
    }
    keys.set(keyId, { publicKey, entry, ...keyWindow(entry, where) });
  }
  return keys;
}

const WINDOW_TS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/**
 * A key entry's validity window, checked like signing.py: {notAfter: RFC 3339 string or null,
 * notBeforeHeight: integer or null}. not_before is validated but not used (a spooled receipt is
 * sealed after its ts; docs/receipts.md "Keys and rotation"). Throws InputError.
 */
function keyWindow(entry, where) {
  for (const name of ['not_before', 'not_after']) {
    const value = entry[name];
    if (value !== undefined && value !== null && (typeof value !== 'string' || !WINDOW_TS.test(value))) {
      throw new InputError(`${where}: ${name} must be an RFC 3339 UTC timestamp with milliseconds or null, got ${shortRepr(value)}`);
    }
  }
  const height = entry.not_before_height;
  if (height !== undefined && height !== null && !(isInt(height) && height >= 0 && height <= MAX_SAFE_INTEGER)) {
    throw new InputError(`${where}: not_before_height must be an integer >= 0 or null, got ${shortRepr(height)}`);
  }
  return { notAfter: entry.not_after ?? null, notBeforeHeight: height ?? null };
}

/**
 * key_window failures (verify.py _key_window): ts at or after the key's not_after (a retired
 * key), or ledger_height below its not_before_height (sealed before the key existed).
 */
function keyWindowFailures(receipt, keyId, key) {
  const fails = [];
  const ts = receipt.ts;
  if (key.notAfter !== null && typeof ts === 'string' && ts >= key.notAfter) {
    fails.push(failure('key_window', `ts ${ts} is not before ${keyId}'s not_after ${key.notAfter} (key retired)`, receipt));
  }
  const height = heightOf(receipt);
  if (key.notBeforeHeight !== null && height !== null && height < key.notBeforeHeight) {
    fails.push(failure('key_window', `ledger_height ${height} is below ${keyId}'s not_before_height ` +
      `${key.notBeforeHeight}: the key did not exist when that height was sealed`, receipt));
  }
  return fails;
}

// ---------------------------------------------------------------------------------------------
// Ed25519

let webCryptoEd25519 = null;
/** Whether this browser's WebCrypto verifies Ed25519 (probed once with RFC 8032 test 1). */
export async function webCryptoHasEd25519() {
  if (webCryptoEd25519 === null) {
    try {
      const pub = hexBytes('d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a');
      const sig = hexBytes('e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155' +
        '5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b');
      const key = await subtle().importKey('raw', pub, { name: 'Ed25519' }, false, ['verify']);
      webCryptoEd25519 = (await subtle().verify({ name: 'Ed25519' }, key, sig, new Uint8Array(0))) === true;
    } catch {
      webCryptoEd25519 = false;
    }
  }
  return webCryptoEd25519;
}

function hexBytes(hex) {
  return Uint8Array.from(hex.match(/../g), (h) => parseInt(h, 16));
}

function littleEndian(bytes) {
  let n = 0n;
  for (let i = bytes.length - 1; i >= 0; i--) n = (n << 8n) | BigInt(bytes[i]);
  return n;
}

function decodePoint(bytes) {
  try {
    return noble.Point.fromBytes(bytes, false); // strict RFC 8032 §5.1.3 decoding (y < p)
  } catch {
    return null;
  }
}

/**
 * Ed25519 verification with libsodium's rules, so the browser and PyNaCl agree on every input:
 * S < L (no malleated signatures), A a canonical point not of small order, R not of small
 * order (crypto_sign_verify_detached), then the cofactorless equation [S]B = R + [k]A of
 * RFC 8032 §5.1.7. backend: 'webcrypto' (crypto.subtle, Chromium/BoringSSL), 'noble'
 * (vendored @noble/ed25519 strict mode, then the cofactorless equation confirmed with its
 * point arithmetic), or 'auto' (WebCrypto when the browser has Ed25519, noble otherwise).
 * Returns {ok: boolean, backend}. Never throws for bad keys or signatures.
 */
export async function ed25519Verify(publicKey, message, signature, backend = 'auto') {
  if (backend === 'auto') backend = (await webCryptoHasEd25519()) ? 'webcrypto' : 'noble';
  const result = (ok) => ({ ok, backend });
  if (publicKey.length !== 32 || signature.length !== 64) return result(false);
  const A = decodePoint(publicKey);
  const rBytes = signature.subarray(0, 32);
  const R = decodePoint(rBytes);
  const S = littleEndian(signature.subarray(32));
  if (!A || A.isSmallOrder() || S >= L || (R && R.isSmallOrder())) return result(false);
  if (backend === 'webcrypto') {
    try {
      const key = await subtle().importKey('raw', publicKey, { name: 'Ed25519' }, false, ['verify']);
      return result((await subtle().verify({ name: 'Ed25519' }, key, signature, message)) === true);
    } catch {
      return result(false);
    }
  }
  if (!R) return result(false);
  try {
    if (!(await noble.verifyAsync(signature, message, publicKey, { zip215: false }))) return result(false);
    // noble checks [8][S]B = [8]R + [8][k]A; libsodium and BoringSSL check it without the 8.
    const k = littleEndian(new Uint8Array(await subtle().digest('SHA-512', concat(rBytes, publicKey, message)))) % L;
    const left = noble.Point.BASE.multiply(S, false);
    return result(R.add(A.multiply(k, false)).equals(left));
  } catch {
    return result(false);
  }
}

// ---------------------------------------------------------------------------------------------
// Receipts and chains (proxy/receipts/verify.py)

function heightOf(r) {
  const v = isPlainObject(r) ? r.ledger_height : undefined;
  return isInt(v) && v >= 0 ? v : null;
}

function receiptIdOf(r) {
  const v = isPlainObject(r) ? r.receipt_id : undefined;
  return typeof v === 'string' ? v : null;
}

function failure(check, detail, receipt = null) {
  return { check, detail, height: heightOf(receipt), receipt_id: receiptIdOf(receipt) };
}

/**
 * Checks of one receipt on its own: schema, unknown_key, signature, genesis.
 * keys: Map from loadPublicKeys. Returns {failures, backend, entry_hash}.
 */
export async function verifyReceipt(receipt, keys, { backend = 'auto', floatsSomewhere = false } = {}) {
  const failures = schemaProblems(receipt, floatsSomewhere).map(([field, problem]) =>
    failure('schema', `${field}: ${problem}`, receipt));
  let used = null;
  if (isPlainObject(receipt)) {
    const keyId = receipt.key_id;
    if (typeof keyId !== 'string' || !keys.has(keyId)) {
      failures.push(failure('unknown_key', `key_id ${shortRepr(keyId)} is not a trusted key`, receipt));
    } else {
      let ok = false;
      try {
        const payload = signingPayload(receipt);
        const sig = b64urlDecode(receipt.ed25519_sig);
        const verdict = await ed25519Verify(keys.get(keyId).publicKey, payload, sig, backend);
        ok = verdict.ok;
        used = verdict.backend;
      } catch {
        ok = false;
      }
      if (!ok) failures.push(failure('signature', `Ed25519 signature does not verify with ${keyId}`, receipt));
      failures.push(...keyWindowFailures(receipt, keyId, keys.get(keyId)));
    }
    const height = heightOf(receipt);
    if (height === 0 && receipt.prev_hash !== GENESIS_PREV_HASH) {
      failures.push(failure('genesis', `height 0 must carry prev_hash ${GENESIS_PREV_HASH}, got ${receipt.prev_hash}`, receipt));
    } else if (height !== null && height > 0 && receipt.prev_hash === GENESIS_PREV_HASH) {
      failures.push(failure('genesis', 'only height 0 may carry the genesis prev_hash', receipt));
    }
  }
  return { failures, backend: used, entry_hash: await entryHashOrNull(receipt) };
}

/**
 * Verify an ordered run of receipts like verify.py's verify_chain: every single-receipt check
 * plus gaps, forks, out-of-order heights, broken prev_hash links and duplicate receipt_ids.
 * Returns {failures, backend, entry_hashes}.
 */
export async function verifyChain(receipts, keys, options = {}) {
  const failures = [];
  const seen = new Map();
  let last = null;
  let lastHashes = new Set();
  let backend = null;
  const entryHashes = [];
  for (const receipt of receipts) {
    const own = await verifyReceipt(receipt, keys, options);
    backend = backend || own.backend;
    entryHashes.push(own.entry_hash);
    const fails = own.failures;
    const height = heightOf(receipt);
    const receiptId = receiptIdOf(receipt);
    if (receiptId !== null) {
      if (seen.has(receiptId)) {
        fails.push(failure('duplicate', `receipt_id already seen at height ${seen.get(receiptId)}`, receipt));
      } else {
        seen.set(receiptId, height);
      }
    }
    if (height !== null) {
      const before = heightOf(last);
      if (before === null) {
        last = receipt;
        lastHashes = new Set([own.entry_hash]);
      } else {
        if (height === before) {
          fails.push(failure('duplicate', `fork: ${receiptIdOf(last)} is also at height ${height}`, receipt));
          lastHashes.add(own.entry_hash);
        } else if (height < before) {
          fails.push(failure('height', `out of order: height ${height} comes after ${before}`, receipt));
        } else {
          if (height > before + 1) {
            const missing = height === before + 2 ? `${before + 1}` : `${before + 1}..${height - 1}`;
            fails.push(failure('height', `gap: height ${missing} missing after ${before}`, receipt));
          } else {
            const expected = await entryHashOrNull(last);
            if (receipt.prev_hash !== expected && !lastHashes.has(receipt.prev_hash)) {
              fails.push(failure('prev_hash', `expected ${expected} got ${receipt.prev_hash}`, receipt));
            }
          }
          last = receipt;
          lastHashes = new Set([own.entry_hash]);
        }
      }
    }
    failures.push(...fails);
  }
  return { failures, backend, entry_hashes: entryHashes };
}

// ---------------------------------------------------------------------------------------------
// RFC 9162 Merkle tree hashing and inclusion proofs

/** RFC 9162 §2.1.1 leaf hash: SHA-256(0x00 || entry). */
export async function leafHash(entry) {
  return sha256(concat(Uint8Array.of(0), entry));
}

async function nodeHash(left, right) {
  return sha256(concat(Uint8Array.of(1), left, right));
}

/**
 * RFC 9162 §2.1.3.2: does `proof` (array of 32-byte Uint8Array) prove the leaf with hash
 * `leaf` at `leafIndex` in a tree of `treeSize` leaves with root `root`? Returns
 * {ok, detail}. Indices are BigInt-safe.
 */
export async function verifyInclusion(leafIndex, treeSize, leaf, proof, root) {
  let fn = BigInt(leafIndex);
  let sn = BigInt(treeSize) - 1n;
  if (fn > sn) return { ok: false, detail: `leaf_index ${leafIndex} is not below tree_size ${treeSize}` };
  let r = leaf;
  for (const p of proof) {
    if (sn === 0n) return { ok: false, detail: 'the proof has more hashes than the tree has levels' };
    if ((fn & 1n) === 1n || fn === sn) {
      r = await nodeHash(p, r);
      if ((fn & 1n) === 0n) {
        while ((fn & 1n) === 0n && fn !== 0n) {
          fn >>= 1n;
          sn >>= 1n;
        }
      }
    } else {
      r = await nodeHash(r, p);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  if (sn !== 0n) return { ok: false, detail: 'the proof has too few hashes for this tree size' };
  if (!equalBytes(r, root)) {
    return { ok: false, detail: `the proof leads to root ${b64Encode(r)}, the checkpoint says ${b64Encode(root)}` };
  }
  return { ok: true, detail: `leaf ${leafIndex} of ${treeSize} reaches the checkpoint root` };
}

const HASH_SIZE = 32;

function sizeBigInt(value) {
  if (typeof value === 'bigint') return value >= 0n ? value : null;
  return Number.isSafeInteger(value) && value >= 0 ? BigInt(value) : null;
}

function isHash(value) {
  return value instanceof Uint8Array && value.length === HASH_SIZE;
}

/**
 * RFC 9162 §2.1.4.2: does `proof` (array of 32-byte Uint8Array) show that the tree of `first`
 * leaves with root `firstRoot` is a prefix of the tree of `second` leaves with root `secondRoot`?
 * The same algorithm, step for step, as proxy/primitives/merkle.py verify_consistency_path: first ==
 * second needs an empty proof and equal roots, first == 0 an empty proof and the empty root
 * SHA-256(""); when first is a power of two its root is the proof's implicit first node. Sizes:
 * Number (safe integer) or BigInt. Returns {ok, detail}; never throws for malformed input.
 */
export async function verifyConsistency(first, second, firstRoot, secondRoot, proof) {
  const no = (detail) => ({ ok: false, detail });
  let fn = sizeBigInt(first);
  let sn = sizeBigInt(second);
  if (!Array.isArray(proof) || !proof.every(isHash)) return no('the proof must be a list of 32-byte hashes');
  if (!isHash(firstRoot) || !isHash(secondRoot)) return no('the roots must be 32-byte hashes');
  if (fn === null || sn === null) return no(`tree sizes must be integers >= 0, got ${first} and ${second}`);
  if (fn > sn) return no(`the first tree (${fn} leaves) is larger than the second (${sn}): the log shrank`);
  if (fn === 0n) {
    const ok = !proof.length && equalBytes(firstRoot, await sha256(new Uint8Array(0)));
    return ok ? { ok, detail: 'the empty tree is a prefix of every tree' }
      : no('an empty first tree needs an empty proof and the empty root');
  }
  if (fn === sn) {
    if (proof.length) return no(`equal tree sizes (${fn}) need an empty proof, got ${proof.length} hashes`);
    return equalBytes(firstRoot, secondRoot) ? { ok: true, detail: `both trees are the same tree of ${fn} leaves` }
      : no(`two different roots for the same tree size ${fn}: the log was rewritten`);
  }
  if (!proof.length) return no('an empty proof cannot prove that a smaller tree is a prefix of a larger one');
  const hashes = (fn & (fn - 1n)) === 0n ? [firstRoot, ...proof] : proof;
  fn -= 1n;
  sn -= 1n;
  while ((fn & 1n) === 1n) {
    fn >>= 1n;
    sn >>= 1n;
  }
  let fr = hashes[0];
  let sr = hashes[0];
  for (const c of hashes.slice(1)) {
    if (sn === 0n) return no('the proof has more hashes than the trees have levels');
    if ((fn & 1n) === 1n || fn === sn) {
      fr = await nodeHash(c, fr);
      sr = await nodeHash(c, sr);
      while ((fn & 1n) === 0n && fn !== 0n) {
        fn >>= 1n;
        sn >>= 1n;
      }
    } else {
      sr = await nodeHash(sr, c);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  if (sn !== 0n) return no('the proof has too few hashes for these tree sizes');
  if (!equalBytes(fr, firstRoot)) {
    return no(`the proof leads to first root ${b64Encode(fr)}, the first checkpoint says ${b64Encode(firstRoot)}`);
  }
  if (!equalBytes(sr, secondRoot)) {
    return no(`the proof leads to second root ${b64Encode(sr)}, the second checkpoint says ${b64Encode(secondRoot)}`);
  }
  return { ok: true, detail: `the tree of ${first} leaves is a prefix of the tree of ${second}` };
}

// ---------------------------------------------------------------------------------------------
// C2SP signed notes and tlog checkpoints

// Python's str.isspace() set, so an origin is judged the same here and in checkpoint.py.
const PY_SPACE = /[\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]/;
const MAX_NOTE_SIGNATURES = 100;

function checkOrigin(origin) {
  if (origin === '' || PY_SPACE.test(origin) || origin.includes('+')) {
    throw new InputError(`line 1 (origin): must be non-empty, without spaces or '+', got ${shortRepr(origin)}`);
  }
}

/** Base64 as Python's b64decode(validate=True) reads signed-note signatures (padded alphabet). */
function b64DecodeNoteSignature(text) {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4 !== 0) throw new InputError('signature is not base64');
  return binaryToBytes(atob(text));
}

/**
 * Split a C2SP signed note (c2sp.org/signed-note) into its text and signature lines, with the
 * rules of checkpoint.py parse_note. Returns {body, signatures: [{name, keyHash, signature}]}.
 * Throws InputError naming the malformed part.
 */
export function parseNote(text) {
  if (typeof text !== 'string') throw new InputError('a signed note must be text');
  if (/[\x00-\x09\x0b-\x1f]/.test(text)) {
    throw new InputError('a signed note must not contain control characters other than newline');
  }
  const split = text.lastIndexOf('\n\n');
  if (split < 0) throw new InputError('not a signed note: no blank line before the signatures');
  const body = text.slice(0, split + 1);
  const sigText = text.slice(split + 2);
  if (!sigText.endsWith('\n')) throw new InputError('signature lines must end with a newline');
  const signatures = [];
  for (const [i, line] of sigText.slice(0, -1).split('\n').entries()) {
    if (!line.startsWith('\u2014 ')) throw new InputError(`signature line ${i + 1} does not start with '\u2014 '`);
    const parts = line.slice(2).split(' ');
    if (parts.length !== 2 || !parts[0] || !parts[1]) {
      throw new InputError(`signature line ${i + 1} is not '\u2014 <name> <base64 signature>'`);
    }
    const raw = b64DecodeNoteSignature(parts[1]);
    if (raw.length < 5) throw new InputError(`signature line ${i + 1}: signature too short`);
    signatures.push({ name: parts[0], keyHash: raw.subarray(0, 4), signature: raw.subarray(4) });
  }
  if (signatures.length > MAX_NOTE_SIGNATURES) {
    throw new InputError(`signed note has more than ${MAX_NOTE_SIGNATURES} signatures`);
  }
  return { body, signatures };
}

/**
 * Parse a tlog-checkpoint (c2sp.org/tlog-checkpoint): a bare body, or the body of a signed
 * note when the text holds a blank line (checkpoint.py parse_checkpoint). Returns
 * {body, origin, treeSize (BigInt), rootHash (Uint8Array), extensions}. Throws InputError.
 */
export function parseCheckpointBody(text) {
  if (typeof text !== 'string') throw new InputError('a checkpoint must be text');
  const body = text.includes('\n\n') ? parseNote(text).body : text;
  if (!body.endsWith('\n')) throw new InputError('checkpoint body must end with a newline');
  const lines = body.slice(0, -1).split('\n');
  if (lines.length < 3) throw new InputError(`checkpoint body needs 3 lines (origin, tree size, root hash), got ${lines.length}`);
  const [origin, sizeLine, rootLine, ...extensions] = lines;
  checkOrigin(origin);
  if (!/^(0|[1-9][0-9]{0,18})$/.test(sizeLine)) {
    throw new InputError(`line 2 (tree size): not a decimal integer: ${shortRepr(sizeLine)}`);
  }
  let rootHash;
  try {
    if (rootLine.length !== 44) throw new InputError('not a base64 SHA-256 hash (44 characters)');
    rootHash = b64Decode(rootLine);
  } catch (err) {
    throw new InputError(`line 3 (root hash): ${err.message}`);
  }
  if (extensions.some((l) => l === '')) throw new InputError('empty extension line in checkpoint body');
  return { body, origin, treeSize: BigInt(sizeLine), rootHash, extensions };
}

/** A signed checkpoint: parseCheckpointBody and parseNote together ({...body fields, signatures}). */
export function parseCheckpoint(text) {
  const checkpoint = parseCheckpointBody(text);
  const { body, signatures } = parseNote(text);
  return { ...checkpoint, body, signatures };
}

/** C2SP signed-note key hash: first 4 bytes of SHA-256(name || 0x0A || 0x01 || public key). */
export async function noteKeyHash(name, publicKey) {
  return (await sha256(concat(enc.encode(name), Uint8Array.of(0x0a, 0x01), publicKey))).subarray(0, 4);
}

/**
 * Signatures on the checkpoint by trusted keys: [{name, key_id, ok}]. Only lines named with
 * the checkpoint's origin (the log's key name) and whose key hash matches a trusted key
 * count; other lines are ignored, as the signed-note spec says.
 */
export async function checkpointSignatures(note, keys, backend = 'auto') {
  const results = [];
  const bodyBytes = enc.encode(note.body);
  for (const [keyId, { publicKey }] of keys) {
    const wanted = await noteKeyHash(note.origin, publicKey);
    for (const sig of note.signatures) {
      if (sig.name !== note.origin || !equalBytes(sig.keyHash, wanted)) continue;
      const verdict = sig.signature.length === 64
        ? await ed25519Verify(publicKey, bodyBytes, sig.signature, backend)
        : { ok: false };
      results.push({ name: sig.name, key_id: keyId, ok: verdict.ok });
    }
  }
  return results;
}

/**
 * Verify a signed checkpoint note like checkpoint.py verify_checkpoint: 'checkpoint' when it is
 * malformed; 'checkpoint_signature' when a trusted key's signature fails or no trusted key
 * signed. Returns {note (parsed, or null), body (the parsed body the inclusion proof is
 * checked against, or null), signatures, failures}.
 */
export async function verifyCheckpointNote(text, keys, backend = 'auto') {
  let note;
  try {
    note = parseCheckpoint(text);
  } catch (err) {
    // Like proofs.py, a text without a blank line still names a root the proof is checked against.
    let body = null;
    try {
      body = parseCheckpointBody(text);
    } catch {
      body = null;
    }
    return { note: null, body, signatures: [], failures: [failure('checkpoint', err.message)] };
  }
  const failures = [];
  const signatures = await checkpointSignatures(note, keys, backend);
  for (const bad of signatures.filter((sig) => !sig.ok)) {
    failures.push(failure('checkpoint_signature', `the signature by ${bad.key_id} does not verify`));
  }
  if (!signatures.some((sig) => sig.ok) && !failures.length) {
    const names = note.signatures.map((sig) => `${sig.name}/${toHex(sig.keyHash)}`).join(', ');
    failures.push(failure('checkpoint_signature', `no signature by a trusted key (signed by ${names})`));
  }
  return { note, body: note, signatures, failures };
}

function pyNumber(value) {
  // The number Python compares: bools are 0/1, floats compare by value.
  if (typeof value === 'boolean') return Number(value);
  if (value instanceof JsonFloat) return value.value;
  return value;
}

/**
 * A proof's JSON list of hashes (standard padded base64 of 32 bytes, RFC 4648 §4) as
 * Uint8Arrays, like proofs.py parse_hashes. Throws InputError naming the bad item.
 */
export function parseProofHashes(values) {
  if (!Array.isArray(values)) throw new InputError('hashes must be a list of base64 strings');
  return values.map((h, i) => {
    try {
      if (typeof h !== 'string' || h.length !== 44) throw new InputError('not a base64 SHA-256 hash (44 characters)');
      return b64Decode(h);
    } catch (err) {
      throw new InputError(`hashes[${i}]: ${err.message}`);
    }
  });
}

function proofSize(value, minimum) {
  return isInt(value) && value >= minimum ? value : null;
}

/**
 * Verify an inclusion proof {leaf_index, tree_size, [leaf_hash], hashes} for `receipt`
 * against a parsed checkpoint body (or null when none parsed), with the checks and order of
 * proofs.py verify_inclusion_proof: every problem is an 'inclusion' failure. Returns {failures, leaf}.
 */
export async function verifyInclusionProof(proof, receipt, checkpoint) {
  const fail = (detail) => failure('inclusion', detail, receipt);
  if (!isPlainObject(proof)) return { failures: [fail('the proof must be a JSON object')], leaf: null };
  const index = proofSize(proof.leaf_index, 0);
  const size = proofSize(proof.tree_size, 1);
  if (index === null || size === null || index >= size) {
    return { failures: [fail(`need 0 <= leaf_index < tree_size, got leaf_index=${shortRepr(proof.leaf_index)} tree_size=${shortRepr(proof.tree_size)}`)], leaf: null };
  }
  let hashes;
  try {
    hashes = parseProofHashes(proof.hashes);
  } catch (err) {
    return { failures: [fail(err.message)], leaf: null };
  }
  const failures = [];
  let leaf;
  try {
    leaf = await leafHash(await sha256(canonicalBytes(receipt)));
  } catch (err) {
    return { failures: [fail(`cannot hash the receipt: ${err.message}`)], leaf: null };
  }
  const height = isPlainObject(receipt) ? pyNumber(receipt.ledger_height) : undefined;
  if (height !== index) failures.push(fail(`leaf_index ${index} is not the receipt's ledger_height ${shortRepr(height)}`));
  if ('leaf_hash' in proof) {
    let stated;
    try {
      if (typeof proof.leaf_hash !== 'string' || proof.leaf_hash.length !== 44) throw new InputError('not a base64 SHA-256 hash');
      stated = b64Decode(proof.leaf_hash);
    } catch (err) {
      return { failures: [...failures, fail(`leaf_hash: ${err.message}`)], leaf };
    }
    if (!equalBytes(stated, leaf)) failures.push(fail('leaf_hash is not SHA-256(0x00 ‖ entry hash) of the receipt'));
  }
  if (!checkpoint) return { failures, leaf };
  if (BigInt(size) !== checkpoint.treeSize) {
    failures.push(fail(`proof is for tree size ${size}, the checkpoint is for ${checkpoint.treeSize}`));
    return { failures, leaf };
  }
  const verdict = await verifyInclusion(index, size, leaf, hashes, checkpoint.rootHash);
  if (!verdict.ok) failures.push(fail(verdict.detail));
  return { failures, leaf };
}

// ---------------------------------------------------------------------------------------------
// Consistency between checkpoints (proofs.py verify_consistency_proof, tree.py
// verify_against_trusted_checkpoint)

/**
 * 'consistency' failures of a proof document {first, second, hashes} between two parsed
 * checkpoint bodies ([old, new], or null when one did not parse), in the checks and order of
 * proofs.py verify_consistency_proof after its checkpoint checks.
 */
async function consistencyFailures(proof, pair) {
  const fail = (detail) => failure('consistency', detail);
  if (!isPlainObject(proof)) return [fail('the proof must be a JSON object')];
  const first = proofSize(proof.first, 0);
  const second = proofSize(proof.second, 0);
  if (first === null || second === null || first > second) {
    return [fail(`need 0 <= first <= second, got first=${shortRepr(proof.first)} second=${shortRepr(proof.second)}`)];
  }
  let hashes;
  try {
    hashes = parseProofHashes(proof.hashes);
  } catch (err) {
    return [fail(err.message)];
  }
  if (!pair) return [];
  const [old, current] = pair;
  const failures = [];
  if (old.origin !== current.origin) {
    failures.push(fail(`the checkpoints are of different logs (${shortRepr(old.origin)}, ${shortRepr(current.origin)})`));
  }
  if (BigInt(first) !== old.treeSize || BigInt(second) !== current.treeSize) {
    failures.push(fail(`proof is for sizes ${first} -> ${second}, the checkpoints are ${old.treeSize} -> ${current.treeSize}`));
    return failures;
  }
  const verdict = await verifyConsistency(first, second, old.rootHash, current.rootHash, hashes);
  if (!verdict.ok) failures.push(fail(`${verdict.detail} (RFC 9162 §2.1.4.2)`));
  return failures;
}

/**
 * Verify a consistency proof document {first, second, hashes} (GET /v1/ledger/proof/consistency)
 * between two signed checkpoint notes, like proofs.py verify_consistency_proof: both notes'
 * format and signatures by `keys` ('checkpoint', 'checkpoint_signature'), then 'consistency'.
 * Returns {failures, first, second} (parsed checkpoint bodies, or null).
 */
export async function verifyConsistencyProof(proof, firstText, secondText, keys, backend = 'auto') {
  const failures = [];
  const parsed = [];
  for (const text of [firstText, secondText]) {
    const checked = await verifyCheckpointNote(text, keys, backend);
    failures.push(...checked.failures);
    parsed.push(checked.body);
  }
  const both = parsed.every(Boolean) ? parsed : null;
  failures.push(...await consistencyFailures(proof, both));
  return { failures, first: parsed[0], second: parsed[1] };
}

async function resolveBackend(backend) {
  if (backend !== 'auto') return backend;
  return (await webCryptoHasEd25519()) ? 'webcrypto' : 'noble';
}

function checkpointFact(body) {
  return { origin: body.origin, tree_size: body.treeSize.toString(), root_hash: b64Encode(body.rootHash) };
}

/** A checkpoint note checked with `keys`, its check names prefixed ('trusted_' or 'current_'). */
async function namedCheckpoint(text, keys, backend, prefix) {
  if (text instanceof Error) return { body: null, failures: [failure(`${prefix}_checkpoint`, text.message)] };
  const checked = await verifyCheckpointNote(text, keys, backend);
  const failures = checked.failures.map((f) => ({ ...f, check: `${prefix}_${f.check}` }));
  return { body: checked.note ? checked.body : null, failures };
}

/**
 * Does the log still extend a checkpoint the user saved earlier? The browser side of
 * `sonate verify --ledger URL --trusted-checkpoint FILE` (tree.py verify_against_trusted_checkpoint,
 * docs/security.md). `savedText`: the signed note kept outside the ledger; `currentText`: the
 * server's latest (GET /v1/ledger/checkpoint); `fetchProof(first, second)`: resolves to the proof
 * document of GET /v1/ledger/proof/consistency?from=first&to=second (the only network access,
 * injected by the page; `keysText` or `currentText` may be an Error when fetching it failed). Checks: 'keys', 'trusted_checkpoint[_signature]', 'current_checkpoint[_signature]',
 * 'truncated' (the current tree is smaller than the saved one: entries deleted), 'consistency'
 * (the saved root is not a prefix of the current tree, RFC 9162 §2.1.4.2: history rewritten).
 * Returns the verifyText result shape, kind 'ledger', with saved / current facts and a summary.
 */
export async function verifyLedgerText(savedText, currentText, keysText, fetchProof, options = {}) {
  const backend = options.backend || 'auto';
  const order = ['keys', 'trusted_checkpoint', 'trusted_checkpoint_signature', 'current_checkpoint',
    'current_checkpoint_signature', 'truncated', 'consistency'];
  const extra = { backend: null, key_source: options.keySource || 'pasted', trusted_key_ids: [] };
  const done = (failures, ran, summary) => summarize('ledger', failures, ran, { ...extra, summary },
    order.filter((id) => !ran.includes(id)));
  let keys;
  try {
    subtle();
    if (keysText instanceof Error) throw keysText;
    if (typeof keysText !== 'string' || !keysText.trim()) throw new InputError('none given');
    keys = await loadPublicKeys(parseJson(keysText).value);
  } catch (err) {
    return done([failure('keys', `trusted keys: ${err.message}`)], ['keys']);
  }
  extra.trusted_key_ids = [...keys.keys()];
  extra.backend = await resolveBackend(backend);
  const saved = await namedCheckpoint(savedText, keys, backend, 'trusted');
  const current = await namedCheckpoint(currentText, keys, backend, 'current');
  const failures = [...saved.failures, ...current.failures];
  if (saved.body) extra.saved = checkpointFact(saved.body);
  if (current.body) extra.current = checkpointFact(current.body);
  if (!saved.body || !current.body) return done(failures, order.slice(0, 5));
  const [m, n] = [saved.body.treeSize, current.body.treeSize];
  if (n < m) {
    failures.push(failure('truncated', `the server's current checkpoint commits to ${n} entries, fewer than the ${m} ` +
      'of the checkpoint you saved: entries were deleted (or this is another log)'));
    return done(failures, order.slice(0, 6), `Ledger NOT consistent: truncated from ${m} to ${n} entries.`);
  }
  let proof;
  try {
    proof = m === 0n ? { first: 0, second: Number(n), hashes: [] } : await fetchProof(Number(m), Number(n));
  } catch (err) {
    return done([...failures, failure('consistency', `could not fetch the consistency proof: ${err.message}`)], order);
  }
  extra.proof_hashes = Array.isArray(proof && proof.hashes) ? proof.hashes.length : null;
  failures.push(...await consistencyFailures(proof, [saved.body, current.body]));
  const ok = !failures.length;
  return done(failures, order, ok
    ? `Ledger consistent: the checkpoint you saved (tree size ${m}) is a prefix of the current tree (size ${n}).`
    : failures.some((f) => f.check === 'consistency')
      ? `Ledger NOT consistent: the current tree (size ${n}) does not extend the saved one (size ${m}): history was rewritten.`
      : undefined);
}

/**
 * Verify the JSON text of a consistency test document {first_checkpoint, second_checkpoint,
 * proof} (tests/vectors/consistency.json) with trusted keys text: verifyConsistencyProof as a
 * verifyText-shaped result, kind 'consistency'.
 */
export async function verifyConsistencyText(documentText, keysText, options = {}) {
  const backend = options.backend || 'auto';
  const order = ['keys', 'checkpoint', 'checkpoint_signature', 'consistency'];
  let doc;
  let keys;
  try {
    subtle();
    doc = parseJson(documentText).value;
    if (!isPlainObject(doc)) throw new InputError('expected {first_checkpoint, second_checkpoint, proof}');
  } catch (err) {
    return summarize('consistency', [failure('input', err.message)], ['input'], {});
  }
  try {
    keys = await loadPublicKeys(parseJson(keysText).value);
  } catch (err) {
    return summarize('consistency', [failure('keys', `trusted keys: ${err.message}`)], ['keys'], {}, order.slice(1));
  }
  const result = await verifyConsistencyProof(doc.proof, doc.first_checkpoint, doc.second_checkpoint, keys, backend);
  return summarize('consistency', result.failures, order,
    { backend: await resolveBackend(backend), trusted_key_ids: [...keys.keys()] });
}

// ---------------------------------------------------------------------------------------------
// Bundles

const BUNDLE_FIELDS = ['bundle_version', 'receipt', 'inclusion_proof', 'checkpoint', 'public_keys'];
const PROOF_FIELDS = ['leaf_index', 'tree_size', 'hashes'];

/** A bundle has bundle_version, or a receipt member where a receipt has receipt_id. */
function isBundle(doc) {
  return isPlainObject(doc) && ('bundle_version' in doc || ('receipt' in doc && !('receipt_id' in doc)));
}

/** Shape problems of a bundle document (bundle.py): all five fields, no others, version 1. */
function bundleProblems(bundle) {
  const problems = [];
  const missing = BUNDLE_FIELDS.filter((name) => !(name in bundle));
  const extra = Object.keys(bundle).filter((name) => !BUNDLE_FIELDS.includes(name)).sort();
  if (missing.length) problems.push(`missing field(s): ${missing.join(', ')}`);
  if (extra.length) problems.push(`unknown field(s): ${extra.join(', ')}`);
  const version = bundle.bundle_version;
  if ('bundle_version' in bundle && (typeof version === 'boolean' || pyNumber(version) !== 1)) {
    problems.push(`bundle_version must be 1, got ${shortRepr(version)}`);
  }
  return problems;
}

/** Missing or unknown inclusion_proof fields of a bundle ('inclusion' problem), or null. */
function proofFieldProblem(proof) {
  if (!isPlainObject(proof)) return null;
  const absent = PROOF_FIELDS.filter((name) => !(name in proof));
  const unknown = Object.keys(proof).filter((name) => !PROOF_FIELDS.includes(name)).sort();
  const parts = [];
  if (absent.length) parts.push(`missing field(s): ${absent.join(', ')}`);
  if (unknown.length) parts.push(`unknown field(s): ${unknown.join(', ')}`);
  return parts.length ? parts.join('; ') : null;
}

// ---------------------------------------------------------------------------------------------
// One entry point for the page and the tests

/**
 * The result object: checks in `ran` pass unless a failure names them; `skipped` checks are
 * listed as not run (ok: null) because an earlier failure made them meaningless.
 */
function summarize(kind, failures, ran, extra, skipped = []) {
  const failed = [...new Set(failures.map((f) => f.check))].sort();
  const detailsOf = (id) => failures.filter((f) => f.check === id).map((f) => f.detail);
  const ids = [...ran, ...failed.filter((id) => !ran.includes(id))];
  const checks = ids.map((id) => ({ id, label: CHECK_LABELS[id], ok: !failed.includes(id), details: detailsOf(id) }));
  for (const id of skipped) {
    if (!ids.includes(id)) checks.push({ id, label: CHECK_LABELS[id], ok: null, details: [] });
  }
  return { kind, valid: failed.length === 0, failed_checks: failed, checks, failures, ...extra };
}

/**
 * Verify the JSON text of a receipt, a bundle or a chain (a JSON array of receipts) against
 * trusted keys (JSON text of a /v1/keys document or key entries). For a bundle, empty keys
 * text means "use the bundle's own public_keys" (self-consistency only, as bundle.py).
 * options.backend: 'auto' | 'webcrypto' | 'noble'.
 *
 * Returns {kind, valid, failed_checks: [check ids], checks: [{id, label, ok, details}],
 * failures: [{check, detail, height, receipt_id}], backend, key_source, ...}. Problems with
 * the inputs themselves are reported as the 'input', 'keys' or 'public_keys' check, never
 * thrown. Check names and order follow proxy/receipts/verify.py, bundle.py and proofs.py.
 */
export async function verifyText(documentText, keysText, options = {}) {
  const backend = options.backend || 'auto';
  let parsed;
  try {
    subtle();
    parsed = parseJson(documentText);
  } catch (err) {
    return summarize('unknown', [failure('input', err.message)], ['input'], {});
  }
  const doc = parsed.value;
  const kind = Array.isArray(doc) ? 'chain' : isBundle(doc) ? 'bundle' : 'receipt';
  const pasted = typeof keysText === 'string' && keysText.trim() !== '';
  const extra = { backend: null, key_source: pasted ? 'pasted' : kind === 'bundle' ? 'bundle' : 'none', trusted_key_ids: [] };

  let keys = new Map();
  if (pasted) {
    try {
      keys = await loadPublicKeys(parseJson(keysText).value);
    } catch (err) {
      return summarize(kind, [failure('keys', `trusted keys: ${err.message}`)], ['input', 'keys'], extra,
        ['schema', 'unknown_key', 'signature', 'key_window']);
    }
  } else if (kind !== 'bundle') {
    return summarize(kind, [failure('keys', 'no trusted public keys given: paste them or fetch /v1/keys')], ['input', 'keys'], extra);
  }

  if (kind === 'chain') {
    extra.trusted_key_ids = [...keys.keys()];
    if (doc.length === 0) return summarize(kind, [failure('input', 'the list holds no receipts')], ['input'], extra);
    const result = await verifyChain(doc, keys, { backend, floatsSomewhere: parsed.floatsSomewhere });
    extra.backend = result.backend;
    extra.entry_hashes = result.entry_hashes;
    return summarize(kind, result.failures,
      ['keys', 'schema', 'unknown_key', 'signature', 'key_window', 'genesis', 'prev_hash', 'height', 'duplicate'], extra);
  }

  if (kind === 'receipt') {
    extra.trusted_key_ids = [...keys.keys()];
    const own = await verifyReceipt(doc, keys, { backend, floatsSomewhere: parsed.floatsSomewhere });
    extra.backend = own.backend;
    extra.entry_hash = own.entry_hash;
    return summarize(kind, own.failures, ['keys', 'schema', 'unknown_key', 'signature', 'key_window', 'genesis'], extra);
  }

  // Bundle, in the order of bundle.py verify_bundle.
  const order = ['bundle', pasted ? 'keys' : 'public_keys', 'schema', 'unknown_key', 'signature', 'key_window', 'genesis',
    'checkpoint', 'checkpoint_signature', 'inclusion'];
  const upTo = (id) => order.slice(0, order.indexOf(id) + 1);
  const after = (id) => order.slice(order.indexOf(id) + 1);
  const ran = order;
  const shape = bundleProblems(doc);
  if (shape.length) return summarize(kind, shape.map((p) => failure('bundle', p)), upTo('bundle'), extra, after('bundle'));
  if (!pasted) {
    try {
      if (!Array.isArray(doc.public_keys) || doc.public_keys.length === 0) {
        throw new InputError('public_keys must be a non-empty list of key entries');
      }
      keys = await loadPublicKeys(doc.public_keys);
    } catch (err) {
      return summarize(kind, [failure('public_keys', err.message)], upTo('public_keys'), extra, after('public_keys'));
    }
  }
  extra.trusted_key_ids = [...keys.keys()];
  const receipt = doc.receipt;
  const own = await verifyReceipt(receipt, keys, { backend, floatsSomewhere: parsed.floatsSomewhere });
  extra.backend = own.backend;
  extra.entry_hash = own.entry_hash;
  const failures = [...own.failures];
  const fieldProblem = proofFieldProblem(doc.inclusion_proof);
  if (fieldProblem) {
    return summarize(kind, [...failures, failure('inclusion', fieldProblem, receipt)], upTo('genesis'), extra,
      ['checkpoint', 'checkpoint_signature']);
  }
  if (typeof doc.checkpoint !== 'string') {
    return summarize(kind, [...failures, failure('checkpoint', 'checkpoint must be the signed note text')],
      upTo('checkpoint'), extra, after('checkpoint'));
  }
  const checked = await verifyCheckpointNote(doc.checkpoint, keys, backend);
  failures.push(...checked.failures);
  if (checked.note) {
    const note = checked.note;
    extra.checkpoint = { origin: note.origin, tree_size: note.treeSize.toString(), root_hash: b64Encode(note.rootHash),
      signatures: checked.signatures };
  }
  const inclusion = await verifyInclusionProof(doc.inclusion_proof, receipt, checked.body);
  failures.push(...inclusion.failures);
  if (inclusion.leaf) extra.leaf_hash = b64Encode(inclusion.leaf);
  return summarize(kind, failures, ran, extra);
}

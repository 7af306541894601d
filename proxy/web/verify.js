// The verify page: reads the forms, runs verifier.js, shows one pass/fail badge per check.
// The ledger form fetches (same origin only) /v1/keys when no keys are pasted, the current checkpoint
// and a consistency proof, and checks them against the saved checkpoint (verifyLedgerText).
//
// ?fallback=1 forces the vendored noble Ed25519 path even where WebCrypto has Ed25519.
// window.sonateVerifier exposes the same verification for scripted use (and the test suite).

import { CHECK_LABELS, verifyConsistencyText, verifyLedgerText, verifyText, webCryptoHasEd25519 }
  from './verifier.js';

const params = new URLSearchParams(location.search);
const forcedBackend = params.get('fallback') === '1' ? 'noble' : params.get('backend');
const backend = ['webcrypto', 'noble'].includes(forcedBackend) ? forcedBackend : 'auto';

const $ = (id) => document.getElementById(id);

function element(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === 'class') node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

function describeBackend(name) {
  return { webcrypto: 'WebCrypto (browser built-in)', noble: '@noble/ed25519 3.2.0 (vendored fallback)' }[name] || 'not used';
}

function render(result) {
  const section = $('results');
  section.hidden = false;
  section.dataset.valid = String(result.valid);
  section.dataset.kind = result.kind;

  const verdict = $('verdict');
  verdict.className = `verdict ${result.valid ? 'pass' : 'fail'}`;
  const what = { receipt: 'Receipt', bundle: 'Bundle', chain: 'Receipt chain', ledger: 'Ledger',
    consistency: 'Consistency proof', unknown: 'Input' }[result.kind];
  const count = result.failed_checks.length;
  verdict.replaceChildren(
    element('span', { 'aria-hidden': 'true' }, result.valid ? '✔' : '✘'),
    element('span', {}, result.summary || (result.valid
      ? `${what} verified: every check passed.`
      : `${what} NOT verified: ${count} check${count === 1 ? '' : 's'} failed.`)),
  );

  const list = $('checks');
  list.replaceChildren(...result.checks.map((check) => {
    const status = check.ok === null ? 'skip' : check.ok ? 'pass' : 'fail';
    const badge = { pass: '✔ PASS', fail: '✘ FAIL', skip: '– NOT RUN' }[status];
    const item = element('li', { class: 'check', 'data-check': check.id, 'data-status': status },
      element('span', { class: `badge ${status}` }, badge),
      element('span', { class: 'check-label' }, check.label || CHECK_LABELS[check.id] || check.id));
    if (check.details.length) {
      item.append(element('ul', { class: 'check-details' }, ...check.details.map((d) => element('li', {}, d))));
    }
    return item;
  }));

  const keysFrom = { bundle: 'the bundle itself (self-consistency only)', server: `${location.origin}/v1/keys` };
  const facts = [
    ['Ed25519 engine', describeBackend(result.backend)],
    ['Keys from', keysFrom[result.key_source] || 'the keys field'],
    ['Trusted key ids', (result.trusted_key_ids || []).join(', ') || 'none'],
  ];
  for (const [label, cp] of [['Saved', result.saved], ['Current', result.current]]) {
    if (cp) facts.push([`${label} tree size`, cp.tree_size], [`${label} root hash`, cp.root_hash]);
  }
  if (typeof result.proof_hashes === 'number') facts.push(['Consistency proof hashes', String(result.proof_hashes)]);
  if (result.entry_hash) facts.push(['Entry hash', result.entry_hash]);
  if (result.leaf_hash) facts.push(['Merkle leaf hash', result.leaf_hash]);
  if (result.checkpoint) {
    facts.push(['Checkpoint origin', result.checkpoint.origin], ['Tree size', result.checkpoint.tree_size],
      ['Root hash', result.checkpoint.root_hash]);
  }
  if (result.entry_hashes) facts.push(['Receipts in chain', String(result.entry_hashes.length)]);
  $('facts').replaceChildren(...facts.flatMap(([k, v]) => [element('dt', {}, k), element('dd', {}, v)]));
  verdict.focus({ preventScroll: true });
}

async function onSubmit(event) {
  event.preventDefault();
  const button = $('verify');
  button.disabled = true;
  button.textContent = 'Verifying…';
  try {
    render(await verifyText($('document').value, $('keys').value, { backend }));
  } finally {
    button.disabled = false;
    button.textContent = 'Verify';
  }
}

async function fetchKeys() {
  const status = $('fetch-status');
  status.textContent = 'Fetching /v1/keys…';
  try {
    const response = await fetch(new URL('/v1/keys', location.origin), { credentials: 'omit', cache: 'no-store' });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const doc = await response.json();
    $('keys').value = JSON.stringify(doc, null, 2);
    const count = Array.isArray(doc.keys) ? doc.keys.length : 0;
    status.textContent = `Loaded ${count} key${count === 1 ? '' : 's'} from ${location.origin}/v1/keys.`;
  } catch (err) {
    status.textContent = `Could not fetch /v1/keys: ${err.message}`;
  }
}

async function onFile(event) {
  const file = event.target.files[0];
  if (file) $('document').value = await file.text();
}

/** GET a same-origin path: its text, or an Error naming the path and the server's message. */
async function fetchText(path) {
  try {
    const response = await fetch(new URL(path, location.origin), { credentials: 'omit', cache: 'no-store' });
    const text = await response.text();
    if (response.ok) return text;
    let message = '';
    try {
      message = JSON.parse(text).error.message;
    } catch {
      message = text.slice(0, 200);
    }
    return new Error(`could not fetch ${path}: HTTP ${response.status} ${message}`.trim());
  } catch (err) {
    return new Error(`could not fetch ${path}: ${err.message}`);
  }
}

async function onCheckLedger(event) {
  event.preventDefault();
  const button = $('check-ledger');
  button.disabled = true;
  button.textContent = 'Checking…';
  try {
    const pasted = $('keys').value.trim() !== '';
    const keysText = pasted ? $('keys').value : await fetchText('/v1/keys');
    const current = await fetchText('/v1/ledger/checkpoint');
    const fetchProof = async (first, second) => {
      const text = await fetchText(`/v1/ledger/proof/consistency?from=${first}&to=${second}`);
      if (text instanceof Error) throw text;
      return JSON.parse(text);
    };
    render(await verifyLedgerText($('saved-checkpoint').value, current, keysText, fetchProof,
      { backend, keySource: pasted ? 'pasted' : 'server' }));
  } finally {
    button.disabled = false;
    button.textContent = 'Check the ledger';
  }
}

async function fetchCurrent() {
  const status = $('current-status');
  const box = $('current-checkpoint');
  const text = await fetchText('/v1/ledger/checkpoint');
  if (text instanceof Error) {
    status.textContent = text.message;
    return;
  }
  box.value = text;
  box.hidden = false;
  status.textContent = `Tree size ${text.split('\n')[1]}: save this text where this server cannot change it.`;
}

async function onSavedFile(event) {
  const file = event.target.files[0];
  if (file) $('saved-checkpoint').value = await file.text();
}

async function showEngine() {
  const native = await webCryptoHasEd25519().catch(() => false);
  const used = backend === 'auto' ? (native ? 'webcrypto' : 'noble') : backend;
  $('engine').textContent = `Ed25519 engine for this page: ${describeBackend(used)}` +
    (backend === 'noble' ? ' — forced by ?fallback=1.' : native ? '.' : ' — this browser’s WebCrypto lacks Ed25519.');
  document.body.dataset.backend = used;
}

/** A document handed over in the fragment (#document=<base64url of its JSON>, e.g. by the review
 * console; a fragment never reaches the server): fill the form, fetch this server's keys, verify. */
async function fromFragment() {
  const match = /^#document=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (!match) return;
  try {
    const binary = atob(match[1].replaceAll('-', '+').replaceAll('_', '/'));
    $('document').value = new TextDecoder().decode(Uint8Array.from(binary, (c) => c.charCodeAt(0)));
  } catch {
    $('document').value = '';
    return;
  }
  await fetchKeys();
  $('verify-form').requestSubmit();
}

$('verify-form').addEventListener('submit', onSubmit);
$('fetch-keys').addEventListener('click', fetchKeys);
$('document-file').addEventListener('change', onFile);
$('ledger-form').addEventListener('submit', onCheckLedger);
$('fetch-current').addEventListener('click', fetchCurrent);
$('saved-checkpoint-file').addEventListener('change', onSavedFile);
$('verdict').tabIndex = -1;

window.sonateVerifier = {
  backend,
  /** verifyText(documentText, keysText) with this page's backend; see verifier.js. */
  verify: (documentText, keysText, options = {}) => verifyText(documentText, keysText, { backend, ...options }),
  /** Run many {document, keys} inputs; resolves to the result of each, in order. */
  verifyAll: async (items, options = {}) => {
    const out = [];
    for (const item of items) out.push(await verifyText(item.document, item.keys, { backend, ...options }));
    return out;
  },
  /** Run many {document, keys} consistency documents ({first_checkpoint, second_checkpoint, proof}). */
  verifyConsistencyAll: async (items, options = {}) => {
    const out = [];
    for (const item of items) out.push(await verifyConsistencyText(item.document, item.keys, { backend, ...options }));
    return out;
  },
};
showEngine().then(fromFragment).finally(() => { document.body.dataset.ready = 'true'; });

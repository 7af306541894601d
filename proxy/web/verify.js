// The verify page: reads the form, runs verifier.js, shows one pass/fail badge per check.
//
// ?fallback=1 forces the vendored noble Ed25519 path even where WebCrypto has Ed25519.
// window.sonateVerifier exposes the same verification for scripted use (and the test suite).

import { CHECK_LABELS, verifyText, webCryptoHasEd25519 } from './verifier.js';

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
  const what = { receipt: 'Receipt', bundle: 'Bundle', chain: 'Receipt chain', unknown: 'Input' }[result.kind];
  verdict.replaceChildren(
    element('span', { 'aria-hidden': 'true' }, result.valid ? '✔' : '✘'),
    element('span', {}, result.valid
      ? `${what} verified: every check passed.`
      : `${what} NOT verified: ${result.failed_checks.length} check${result.failed_checks.length === 1 ? '' : 's'} failed.`),
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

  const facts = [
    ['Ed25519 engine', describeBackend(result.backend)],
    ['Keys from', result.key_source === 'bundle' ? 'the bundle itself (self-consistency only)' : 'the keys field'],
    ['Trusted key ids', (result.trusted_key_ids || []).join(', ') || 'none'],
  ];
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

async function showEngine() {
  const native = await webCryptoHasEd25519().catch(() => false);
  const used = backend === 'auto' ? (native ? 'webcrypto' : 'noble') : backend;
  $('engine').textContent = `Ed25519 engine for this page: ${describeBackend(used)}` +
    (backend === 'noble' ? ' — forced by ?fallback=1.' : native ? '.' : ' — this browser’s WebCrypto lacks Ed25519.');
  document.body.dataset.backend = used;
}

$('verify-form').addEventListener('submit', onSubmit);
$('fetch-keys').addEventListener('click', fetchKeys);
$('document-file').addEventListener('change', onFile);
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
};
showEngine().finally(() => { document.body.dataset.ready = 'true'; });

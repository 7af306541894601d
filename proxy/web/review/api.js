// The review APIs of this server, called with the reviewer's key as a bearer token.
// The key lives in this module's memory only (never in storage, a cookie or the URL): a reload forgets it.

let key = null;

/** Remember the reviewer's key for this tab (null forgets it). */
export function setKey(value) {
  key = value || null;
}

export function hasKey() {
  return key !== null;
}

/** An API error: the HTTP status and the server's OpenAI-style error (message, code). */
export class ApiError extends Error {
  constructor(status, error) {
    super(error && error.message ? error.message : `HTTP ${status}`);
    this.status = status;
    this.code = error && error.code;
  }
}

/** Call ``path`` on this origin; resolves to {body, headers}; rejects with ApiError. */
export async function call(path, { method = 'GET', body } = {}) {
  const headers = { Authorization: `Bearer ${key}` };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const response = await fetch(new URL(path, location.origin), {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'omit', cache: 'no-store', redirect: 'error',
  });
  const text = await response.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = null;
  }
  if (!response.ok) throw new ApiError(response.status, parsed && parsed.error);
  return { body: parsed, headers: response.headers };
}

/** GET with a query built from ``params`` (empty values left out). */
export function get(path, params = {}) {
  const query = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== '' && v != null));
  return call(query.size ? `${path}?${query}` : path);
}

/** A receipt as the browser verifier reads it: its offline bundle, else the receipt itself. */
export async function receiptDocument(receiptId) {
  const id = encodeURIComponent(receiptId);
  try {
    return (await call(`/v1/receipts/${id}?bundle=1`)).body;
  } catch (err) {
    if (err.status === 404 || err.status === 401 || err.status === 403) throw err;
    return (await call(`/v1/receipts/${id}`)).body;
  }
}

// The reviewer console: escalation queue and cases, blind adjudication passes, the lead's
// resolution, Gwet's AC1 with its interval. Plain ES module, no framework; every piece of server
// data is set as text (textContent / text nodes), never parsed as HTML.
//
// Views are addressed by the URL fragment (#/escalations, #/escalations/<id>, #/items,
// #/items/<id>, #/agreement), so moving between them never reloads the page (which would forget
// the key).

import { ApiError, call, get, hasKey, receiptDocument, setKey } from './api.js';

const $ = (id) => document.getElementById(id);

/** An element with attributes and children (strings become text nodes, never HTML). */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === false || value == null) continue;
    if (name === 'class') node.className = value;
    else if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child != null && child !== false) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

const state = { role: null, items: new Map(), escalationFilters: { status: 'open', domain: '', age: '' },
  itemFilters: { reason: '' } };

// The escalation decisions and the statuses they apply to (docs/review.md; proxy/server/flow/review/escalations.py).
const DECISIONS = {
  approve: { from: ['pending'], label: 'Approve: the model answers the masked request' },
  answer: { from: ['pending', 'drafted'], label: 'Answer: write the answer yourself', content: true },
  edit: { from: ['drafted'], label: 'Edit the draft', content: true },
  release: { from: ['drafted'], label: 'Release the draft as it is' },
  reject: { from: ['pending', 'drafted'], label: 'Reject with a reason the requester reads' },
};
const AGES = { '': 'any age', older_900: 'older than 15 min', older_3600: 'older than 1 h',
  older_86400: 'older than 24 h', newer_3600: 'newer than 1 h' };

function flash(text, kind = 'ok') {
  const box = $('flash');
  box.hidden = false;
  box.className = `flash ${kind}`;
  box.textContent = text;
}

function describeError(err) {
  if (err instanceof ApiError) return `${err.status}${err.code ? ` ${err.code}` : ''}: ${err.message}`;
  return String(err && err.message ? err.message : err);
}

function age(seconds) {
  if (seconds == null) return '—';
  if (seconds < 90) return `${seconds} s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
  if (seconds < 172800) return `${Math.round(seconds / 3600)} h`;
  return `${Math.round(seconds / 86400)} d`;
}

/** The text of a message's content: a string, or the text of its parts (others named in brackets). */
function messageText(content) {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return content == null ? '' : JSON.stringify(content);
  return content.map((part) => (typeof part.text === 'string' ? part.text : `[${part.type || 'part'}]`)).join('\n');
}

function messages(list) {
  return el('ol', { class: 'messages' }, (list || []).map((m) => el('li', { class: `message role-${m.role}` },
    el('span', { class: 'role' }, m.role || '?'), el('pre', {}, messageText(m.content)))));
}

function completionText(completion) {
  const choice = completion && completion.choices && completion.choices[0];
  return choice ? messageText(choice.message && choice.message.content) : '';
}

function facts(pairs) {
  return el('dl', { class: 'facts' }, pairs.filter(([, v]) => v !== undefined)
    .flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v == null || v === '' ? '—' : v)]));
}

/** A button that opens the browser verifier in a new tab with this receipt (its bundle when proven). */
function verifyButton(receiptId, label = 'Verify') {
  return el('button', {
    type: 'button', class: 'link verify', 'data-receipt': receiptId, title: `Verify ${receiptId} in the browser verifier`,
    onclick: async (event) => {
      const tab = window.open('', '_blank');  // opened on the click itself, filled once the receipt is read
      try {
        const json = JSON.stringify(await receiptDocument(receiptId));
        const bytes = new TextEncoder().encode(json);
        let binary = '';
        for (const b of bytes) binary += String.fromCharCode(b);
        const encoded = btoa(binary).replaceAll('+', '-').replaceAll('/', '_').replace(/=+$/, '');
        if (tab) {
          tab.opener = null;
          tab.location.href = new URL(`/verify/#document=${encoded}`, location.origin).href;
        }
      } catch (err) {
        if (tab) tab.close();
        flash(`Could not read receipt ${receiptId}: ${describeError(err)}`, 'error');
      }
      event.target.blur();
    },
  }, label);
}

function receiptCell(receiptId) {
  return receiptId ? el('span', { class: 'receipt' }, el('code', {}, receiptId), ' ', verifyButton(receiptId)) : '—';
}

function table(headers, rows, caption) {
  return el('table', {}, caption ? el('caption', {}, caption) : null,
    el('thead', {}, el('tr', {}, headers.map((h) => el('th', { scope: 'col' }, h)))),
    el('tbody', {}, rows.length ? rows
      : el('tr', {}, el('td', { colspan: headers.length, class: 'empty' }, 'Nothing here.'))));
}

function rowLink(href, text) {
  return el('a', { href, 'data-row': true }, text);
}

function topScore(scores) {
  const entries = Object.entries(scores || {}).sort((a, b) => Number(b[1]) - Number(a[1]));
  return entries.length ? `${entries[0][0]} ${entries[0][1]}` : '—';
}

// -- escalations ------------------------------------------------------------------------------------

function escalationQuery(status, after) {
  const { domain, age: ageFilter } = state.escalationFilters;
  const [kind, seconds] = ageFilter ? ageFilter.split('_') : [null, null];
  return { status, domain, older_than: kind === 'older' ? seconds : '', newer_than: kind === 'newer' ? seconds : '',
    limit: 50, after };
}

function escalationFilters(onChange) {
  const f = state.escalationFilters;
  const status = el('select', { id: 'filter-status' }, [['open', 'pending, then drafted'], ['pending', 'pending'],
    ['drafted', 'drafted'], ['resolved', 'resolved'], ['aborted', 'aborted'], ['all', 'all']]
    .map(([v, t]) => el('option', { value: v, selected: v === f.status }, t)));
  const domain = el('input', { id: 'filter-domain', value: f.domain, placeholder: 'any domain', list: 'domains',
    spellcheck: 'false' });
  const ageSelect = el('select', { id: 'filter-age' },
    Object.entries(AGES).map(([v, t]) => el('option', { value: v, selected: v === f.age }, t)));
  const form = el('form', { class: 'filters', onsubmit: (e) => { e.preventDefault(); } },
    el('label', {}, 'Status ', status), el('label', {}, 'Domain ', domain),
    el('datalist', { id: 'domains' }, ['legal', 'medical', 'financial'].map((d) => el('option', { value: d }))),
    el('label', {}, 'Age ', ageSelect));
  const changed = () => {
    Object.assign(f, { status: status.value, domain: domain.value.trim(), age: ageSelect.value });
    onChange();
  };
  status.addEventListener('change', changed);
  ageSelect.addEventListener('change', changed);
  domain.addEventListener('change', changed);
  return form;
}

function escalationRow(c) {
  return el('tr', { 'data-status': c.status },
    el('td', {}, rowLink(`#/escalations/${encodeURIComponent(c.id)}`, c.id)),
    el('td', {}, el('span', { class: `status ${c.status}` }, c.status)),
    el('td', {}, c.domain), el('td', {}, age(c.age_seconds)), el('td', {}, c.api || 'chat'),
    el('td', {}, c.model), el('td', {}, topScore(c.evidence && c.evidence.scores)),
    el('td', {}, messageText((c.messages || []).filter((m) => m.role === 'user').map((m) => messageText(m.content)).at(-1))
      .slice(0, 200)));
}

async function showEscalations(view) {
  const body = el('tbody');
  const note = el('p', { class: 'hint' });
  const load = async () => {
    body.replaceChildren();
    const statuses = state.escalationFilters.status === 'open' ? ['pending', 'drafted'] : [state.escalationFilters.status];
    let count = 0;
    for (const status of statuses) {  // pending first, then drafted
      let after = null;
      let page;
      do {
        page = (await get('/v1/review/escalations', escalationQuery(status, after))).body;
        body.append(...page.data.map(escalationRow));
        count += page.data.length;
        after = page.last_id;
      } while (page.has_more && count < 200);
    }
    if (!count) body.append(el('tr', {}, el('td', { colspan: 8, class: 'empty' }, 'No escalation matches.')));
    note.textContent = `${count} case${count === 1 ? '' : 's'} shown, oldest first within each status.`;
  };
  view.replaceChildren(el('h2', {}, 'Escalations'), escalationFilters(() => load().catch(showError)),
    el('table', { id: 'escalations' }, el('thead', {}, el('tr', {}, ['Case', 'Status', 'Domain', 'Age', 'API', 'Model',
      'Top score', 'Last user message (masked)'].map((h) => el('th', { scope: 'col' }, h)))), body), note);
  await load();
}

function evidenceSection(evidence) {
  const e = evidence || {};
  const thresholds = e.thresholds || {};
  const detector = e.detector || {};
  return el('section', { class: 'card', id: 'evidence' }, el('h3', {}, 'Why it was escalated'),
    facts([['Policy', e.policy_id], ['Domain', e.domain], ['Confidence', e.confidence],
      ['Ambiguous band', e.ambiguous == null ? null : e.ambiguous ? 'yes' : 'no'],
      ['Threshold', thresholds.threshold], ['Margin', thresholds.margin], ['Band below it does', thresholds.ambiguous],
      ['Detector', detector.name ? `${detector.name} ${detector.version}` : null], ['Policy version', e.policy_version]]),
    table(['Domain', 'Score'], Object.entries(e.scores || {}).sort((a, b) => Number(b[1]) - Number(a[1]))
      .map(([d, s]) => el('tr', {}, el('td', {}, d), el('td', { class: 'num' }, s))), 'Classifier scores, highest first'));
}

function decisionForm(c, reload) {
  const options = Object.entries(DECISIONS).filter(([, d]) => d.from.includes(c.status));
  if (!options.length) return el('p', { class: 'hint' }, `This case is ${c.status}: no decision applies.`);
  const content = el('textarea', { id: 'content', rows: 6, spellcheck: 'true' });
  const reason = el('input', { id: 'reason', type: 'text', maxlength: 4000 });
  const keep = el('input', { id: 'keep-draft', type: 'checkbox' });
  const note = el('textarea', { id: 'note', rows: 3, required: true, maxlength: 4000, 'aria-describedby': 'note-hint' });
  const contentField = el('div', { class: 'field', hidden: true }, el('label', { for: 'content' },
    'Answer (use the placeholders as written, e.g. <PERSON_1>; the requester sees them restored)'), content);
  const reasonField = el('div', { class: 'field', hidden: true }, el('label', { for: 'reason' },
    'Reason the requester reads (optional)'), reason);
  const keepField = el('label', { class: 'inline', hidden: true }, keep, ' Keep as a draft (release later)');
  const radios = options.map(([value, d], i) => el('label', { class: 'choice' },
    el('input', { type: 'radio', name: 'decision', value, checked: i === 0 }), ' ', d.label));
  const submit = el('button', { type: 'submit', id: 'decide' }, 'Record the decision');
  const sync = () => {
    const chosen = form.querySelector('input[name=decision]:checked').value;
    contentField.hidden = !DECISIONS[chosen].content;
    reasonField.hidden = chosen !== 'reject';
    keepField.hidden = !['approve', 'answer', 'edit'].includes(chosen);
    if (chosen === 'edit' && !content.value) content.value = completionText(c.draft);
  };
  const form = el('form', { id: 'decision-form', class: 'card', novalidate: true },
    el('h3', {}, 'Decision'), el('fieldset', { onchange: sync }, el('legend', {}, 'Action'), radios),
    contentField, reasonField, keepField,
    el('div', { class: 'field' }, el('label', { for: 'note' }, 'Note (required; reviewers only, receipted by hash)'),
      el('p', { class: 'hint', id: 'note-hint' }, 'Why you decided this way.'), note),
    submit);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const decision = form.querySelector('input[name=decision]:checked').value;
    if (!note.value.trim()) {
      flash('A note is required.', 'error');
      note.focus();
      return;
    }
    const body = { decision, note: note.value.trim() };
    if (DECISIONS[decision].content) {
      if (!content.value.trim()) {
        flash('The answer is empty.', 'error');
        content.focus();
        return;
      }
      body.content = content.value;
    }
    if (decision === 'reject' && reason.value.trim()) body.reason = reason.value.trim();
    if (['approve', 'answer', 'edit'].includes(decision) && keep.checked) body.release = false;
    submit.disabled = true;
    submit.textContent = 'Recording…';
    try {
      const { body: after, headers } = await call(`/v1/admin/escalations/${encodeURIComponent(c.id)}/resolve`,
        { method: 'POST', body });
      await reload();
      flash(`Recorded ${decision}: the case is ${after.status}. Receipt ${headers.get('x-sonate-receipt-id')}.`);
    } catch (err) {
      flash(`Not recorded — ${describeError(err)}`, 'error');
      submit.disabled = false;
      submit.textContent = 'Record the decision';
    }
  });
  sync();
  return form;
}

async function showCase(view, caseId) {
  const render = async () => {
    const c = (await get(`/v1/review/escalations/${encodeURIComponent(caseId)}`)).body;
    const steps = (c.steps || []).map((s) => el('tr', {}, el('td', {}, s.step), el('td', {}, s.reviewer),
      el('td', {}, s.ts), el('td', {}, receiptCell(s.receipt_id))));
    const resolution = c.resolution || {};
    view.replaceChildren(
      el('p', {}, el('a', { href: '#/escalations' }, '← Escalations')),
      el('h2', {}, 'Case ', el('code', {}, c.id), ' ', el('span', { class: `status ${c.status}` }, c.status)),
      el('div', { class: 'columns' },
        el('div', {},
          el('section', { class: 'card' }, el('h3', {}, 'Request (masked)'),
            facts([['Requester', c.actor], ['API', c.api || 'chat'], ['Model', c.model], ['Created', c.created],
              ['Age', age(c.age_seconds)], ['Escalation receipt', receiptCell(c.receipt_id)]]),
            messages(c.messages)),
          c.draft ? el('section', { class: 'card', id: 'draft' }, el('h3', {}, 'Draft (not released)'),
            el('pre', {}, completionText(c.draft))) : null,
          c.answer ? el('section', { class: 'card', id: 'answer' }, el('h3', {}, 'Released answer'),
            el('pre', {}, completionText(c.answer))) : null,
          c.reason ? el('section', { class: 'card', id: 'rejection' }, el('h3', {}, 'Rejected'),
            el('p', {}, c.reason)) : null,
          decisionForm(c, render),
          el('section', { class: 'card', id: 'steps' }, el('h3', {}, 'Receipted steps'),
            table(['Step', 'Reviewer', 'Time', 'Receipt'], steps),
            resolution.decision ? facts([['Last decision', resolution.decision], ['By', resolution.reviewer],
              ['Note', resolution.note]]) : null)),
        el('div', {}, evidenceSection(c.evidence))));
  };
  await render();
}

// -- adjudication -----------------------------------------------------------------------------------

function itemRow(item) {
  state.items.set(item.id, item);
  return el('tr', { 'data-status': item.status },
    el('td', {}, rowLink(`#/items/${encodeURIComponent(item.id)}`, item.id)),
    el('td', {}, el('span', { class: `status ${item.status}` }, item.status)),
    el('td', {}, (item.reasons || []).join(', ')), el('td', {}, item.domain),
    el('td', {}, item.policy_id), el('td', {}, item.guardrail_action),
    el('td', {}, item.open_passes ? item.open_passes.join(', ') : '—'));
}

async function itemTable(params, id, caption) {
  const page = (await get('/v1/review/items', { ...params, reason: state.itemFilters.reason, limit: 100 })).body;
  return el('table', { id }, el('caption', {}, caption),
    el('thead', {}, el('tr', {}, ['Item', 'Status', 'Reasons', 'Domain', 'Policy', 'Action', 'Open passes']
      .map((h) => el('th', { scope: 'col' }, h)))),
    el('tbody', {}, page.data.length ? page.data.map(itemRow)
      : el('tr', {}, el('td', { colspan: 7, class: 'empty' }, 'Nothing to review.'))));
}

async function showItems(view) {
  const reason = el('select', { id: 'filter-reason' }, [['', 'any reason'], ['apology', 'apology'],
    ['trigger', 'trigger'], ['sample', 'sample']].map(([v, t]) => el('option', { value: v,
    selected: v === state.itemFilters.reason }, t)));
  const lists = el('div');
  const load = async () => {
    state.items.clear();
    const tables = [await itemTable({ status: 'todo' }, 'todo', 'Your passes to give (blind: other passes are hidden)')];
    if (state.role === 'admin') {
      tables.push(await itemTable({ status: 'disputed' }, 'disputed', 'Disputed: the lead resolves'));
    }
    lists.replaceChildren(...tables);
  };
  reason.addEventListener('change', () => {
    state.itemFilters.reason = reason.value;
    load().catch(showError);
  });
  view.replaceChildren(el('h2', {}, 'Adjudication'),
    el('p', { class: 'hint' }, 'Items your own requests created are not offered to you.'),
    el('form', { class: 'filters', onsubmit: (e) => e.preventDefault() }, el('label', {}, 'Reason ', reason)), lists);
  await load();
}

function yesNo(name, question) {
  return el('fieldset', { class: 'yesno' }, el('legend', {}, question),
    el('label', { class: 'choice' }, el('input', { type: 'radio', name, value: 'true', required: true }), ' yes'),
    el('label', { class: 'choice' }, el('input', { type: 'radio', name, value: 'false' }), ' no'));
}

function verdictForm(item, { lead }) {
  const passChoice = el('select', { id: 'pass' }, el('option', { value: '' }, 'next free pass'),
    (item.open_passes || []).map((p) => el('option', { value: p }, `pass ${p}`)));
  const expected = el('input', { id: 'expected-policy', type: 'text', maxlength: 200, spellcheck: 'false' });
  const note = el('textarea', { id: 'verdict-note', rows: 3, required: true, maxlength: 4000 });
  const submit = el('button', { type: 'submit', id: 'give-verdict' }, lead ? 'Resolve as lead' : 'Give my pass');
  const form = el('form', { id: 'verdict-form', class: 'card', novalidate: true },
    el('h3', {}, lead ? 'Lead resolution' : 'Your verdict'),
    yesNo('breach', 'Is a policy breach verified?'), yesNo('intent_permissible', 'Is the intent permissible?'),
    yesNo('content_harmful', 'Is the content harmful on re-inspection?'),
    el('div', { class: 'field' }, el('label', { for: 'expected-policy' },
      'Policy that should have acted (a false negative; optional)'), expected),
    lead ? null : el('div', { class: 'field' }, el('label', { for: 'pass' }, 'Pass'), passChoice),
    el('div', { class: 'field' }, el('label', { for: 'verdict-note' }, 'Note (required)'), note), submit);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const answer = (name) => form.querySelector(`input[name=${name}]:checked`);
    const missing = ['breach', 'intent_permissible', 'content_harmful'].find((n) => !answer(n));
    if (missing || !note.value.trim()) {
      flash(missing ? 'Answer the three questions.' : 'A note is required.', 'error');
      (missing ? form.querySelector(`input[name=${missing}]`) : note).focus();
      return;
    }
    const yes = (name) => answer(name).value === 'true';
    const body = { breach: yes('breach'), intent_permissible: yes('intent_permissible'),
      content_harmful: yes('content_harmful'), note: note.value.trim() };
    if (expected.value.trim()) body.expected_policy_id = expected.value.trim();
    if (!lead && passChoice.value) body.pass = passChoice.value;
    submit.disabled = true;
    try {
      const path = `/v1/review/items/${encodeURIComponent(item.id)}/${lead ? 'resolve' : 'verdicts'}`;
      const { body: after, headers } = await call(path, { method: 'POST', body });
      const receiptId = headers.get('x-sonate-receipt-id');
      view().replaceChildren(el('p', {}, el('a', { href: '#/items' }, '← Adjudication')),
        el('h2', {}, lead ? 'Resolved' : `Pass ${after.your_pass || ''} recorded`),
        el('p', {}, `Item ${item.id} is now ${after.status}.`), el('p', {}, 'Receipt: ', receiptCell(receiptId)));
      flash(`Recorded. Receipt ${receiptId}.`);
    } catch (err) {
      flash(`Not recorded — ${describeError(err)}`, 'error');
      submit.disabled = false;
    }
  });
  return form;
}

const view = () => $('view');

function passesSection(item) {
  const rows = Object.entries(item.passes || {}).map(([name, p]) => el('tr', {}, el('td', {}, name),
    el('td', {}, p.reviewer), el('td', {}, String(p.verdict.breach)), el('td', {}, String(p.verdict.intent_permissible)),
    el('td', {}, String(p.verdict.content_harmful)), el('td', {}, p.verdict.note || '')));
  return el('section', { class: 'card', id: 'passes' }, el('h3', {}, 'Passes'),
    table(['Pass', 'Reviewer', 'Breach', 'Intent permissible', 'Harmful', 'Note'], rows),
    item.final ? facts([['Outcome', item.final.label], ['Decided by', item.final.decided_by]]) : null);
}

async function showItem(target, itemId) {
  // An open item is shown from the blind to-do list (never with another pass's verdict); a lead
  // reading a disputed or final item gets the whole item.
  let item = state.items.get(itemId);
  if (!item) {
    item = (await get(`/v1/review/items/${encodeURIComponent(itemId)}`)).body;
    if (['pending', 'awaiting_a', 'awaiting_b'].includes(item.status)) {
      item = Object.fromEntries(Object.entries(item).filter(([k]) => !['passes', 'lead', 'final'].includes(k)));
    }
  }
  const open = ['pending', 'awaiting_a', 'awaiting_b'].includes(item.status);
  target.replaceChildren(
    el('p', {}, el('a', { href: '#/items' }, '← Adjudication')),
    el('h2', {}, 'Item ', el('code', {}, item.id), ' ', el('span', { class: `status ${item.status}` }, item.status)),
    el('div', { class: 'columns' },
      el('div', {},
        el('section', { class: 'card' }, el('h3', {}, 'Interaction (masked)'),
          facts([['Reasons', (item.reasons || []).join(', ')], ['Domain', item.domain], ['Policy', item.policy_id],
            ['Action', item.guardrail_action], ['Triggered', (item.triggered_policies || []).join(', ')],
            ['Model', item.model]]),
          messages(item.messages),
          el('h4', {}, 'Answer the client got'), el('pre', { class: 'answer' }, item.response || '—')),
        el('section', { class: 'card', id: 'item-receipts' }, el('h3', {}, 'Receipts'),
          el('ul', { class: 'plain' }, (item.receipt_ids || []).map((r) => el('li', {}, receiptCell(r))))),
        open ? null : passesSection(item)),
      el('div', {}, open ? verdictForm(item, { lead: false })
        : item.status === 'disputed' && state.role === 'admin' ? verdictForm(item, { lead: true })
          : el('p', { class: 'hint' }, `This item is ${item.status}.`))));
}

// -- agreement --------------------------------------------------------------------------------------

function fixed(x) {
  return typeof x === 'number' ? x.toFixed(3) : '—';
}

async function showAgreement(target) {
  const { data } = (await get('/v1/review/agreement')).body;
  const rows = Object.entries(data).map(([domain, a]) => el('tr', { 'data-domain': domain }, el('td', {}, domain),
    el('td', { class: 'num' }, String(a.n)), el('td', { class: 'num ac1' }, fixed(a.ac1)),
    el('td', { class: 'num interval' }, a.interval && a.interval.low != null
      ? `${fixed(a.interval.low)} – ${fixed(a.interval.high)}` : 'n/a'),
    el('td', { class: 'num' }, fixed(a.observed_agreement))));
  target.replaceChildren(el('h2', {}, 'Agreement between passes'),
    el('p', { class: 'hint' }, "Gwet's AC1 of the outcome labels of pass A and pass B, per domain, with its 95% "
      + 'interval (normal interval from a bootstrap of 1,000 resamples of the items).'),
    table(['Domain', 'Double-rated items', 'AC1', '95% interval', 'Observed agreement'], rows));
}

// -- shell ------------------------------------------------------------------------------------------

function showError(err) {
  flash(describeError(err), 'error');
}

async function route() {
  if (!hasKey()) return;
  const [, section, id] = (location.hash || '#/').split('/').map(decodeURIComponent);
  const tab = section || (state.role === 'admin' ? 'escalations' : 'items');
  for (const link of document.querySelectorAll('#tabs a')) {
    link.setAttribute('aria-current', link.dataset.tab === tab ? 'page' : 'false');
  }
  document.body.dataset.view = id ? `${tab}-detail` : tab;
  document.body.dataset.ready = 'false';
  const target = view();
  try {
    if (tab === 'escalations' && id) await showCase(target, id);
    else if (tab === 'escalations') await showEscalations(target);
    else if (tab === 'items' && id) await showItem(target, id);
    else if (tab === 'items') await showItems(target);
    else if (tab === 'agreement') await showAgreement(target);
    else target.replaceChildren(el('p', {}, 'Unknown view.'));
  } catch (err) {
    target.replaceChildren(el('p', { class: 'error' }, describeError(err),
      err.status === 403 ? ' (this view needs another role)' : ''));
  } finally {
    document.body.dataset.ready = 'true';
  }
}

/** The role of the key: admin when it may read the escalation queue, reviewer when only the items. */
async function detectRole() {
  await get('/v1/review/items', { limit: 1 });  // 401 unknown key, 403 a client key
  try {
    await get('/v1/review/escalations', { limit: 1 });
    return 'admin';
  } catch (err) {
    if (err.status === 403) return 'reviewer';
    throw err;
  }
}

async function onKey(event) {
  event.preventDefault();
  const input = $('key');
  setKey(input.value.trim());
  $('key-status').textContent = 'Checking…';
  try {
    state.role = await detectRole();
  } catch (err) {
    setKey(null);
    $('key-status').textContent = `Not accepted — ${describeError(err)}`;
    return;
  }
  input.value = '';
  $('key-form').hidden = true;
  $('tabs').hidden = $('sign-out').hidden = $('shortcuts').hidden = false;
  $('who').textContent = state.role === 'admin' ? 'Signed in as a lead (admin)' : 'Signed in as a reviewer';
  document.body.dataset.role = state.role;
  await route();
}

function signOut() {
  setKey(null);
  state.role = null;
  state.items.clear();
  $('view').replaceChildren();
  $('flash').hidden = true;
  $('key-form').hidden = false;
  $('tabs').hidden = $('sign-out').hidden = $('shortcuts').hidden = true;
  $('who').textContent = '';
  $('key-status').textContent = 'Key forgotten.';
  $('key').focus();
}

function onKeydown(event) {
  if (!hasKey() || event.ctrlKey || event.metaKey || event.altKey) return;
  if (event.target.closest('input, textarea, select')) return;
  const rows = [...document.querySelectorAll('[data-row]')];
  const at = rows.indexOf(document.activeElement);
  const tabs = { 1: '#/escalations', 2: '#/items', 3: '#/agreement' };
  if (tabs[event.key]) location.hash = tabs[event.key];
  else if (event.key === 'r') route();
  else if (event.key === 'j' && rows.length) rows[Math.min(at + 1, rows.length - 1)].focus();
  else if (event.key === 'k' && rows.length) rows[Math.max(at - 1, 0)].focus();
  else if (event.key === 'Escape' && location.hash.split('/').length > 2) {
    location.hash = location.hash.split('/').slice(0, 2).join('/');
  }
  else return;
  event.preventDefault();
}

$('key-form').addEventListener('submit', onKey);
$('sign-out').addEventListener('click', signOut);
window.addEventListener('hashchange', () => {
  $('flash').hidden = true;
  route();
});
document.addEventListener('keydown', onKeydown);
document.body.dataset.ready = 'true';
$('key').focus();

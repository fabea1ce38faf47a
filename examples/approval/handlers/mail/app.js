/**
 * `mail`: sends the mails of an approval through the mail service, each exactly once.
 *
 * Payload: {"approval_id": 42, "service": "http://127.0.0.1:8025/send",
 *           "from": "approvals@example.com", "to": ["sam@example.com", "finance@example.com"],
 *           "subject": "Request PO-1042 approved", "text": "..."}
 * Result:  {"sent": ["finance@example.com"], "already_sent": ["sam@example.com"]}
 *
 * Each recipient's mail is one external effect, guarded by the effect ledger under the key
 * `mail:<approval id>:<recipient>`: sent only if the key is not recorded, and recorded right
 * after the service accepted it. When the service fails on the second recipient, the task is
 * retried and the retry skips the first one, so nobody gets a mail twice. The key also goes to
 * the service as its `idempotency-key` header: a service that deduplicates on it closes the one
 * gap a ledger cannot, a host dying after the service accepted a mail and before the record.
 *
 * The service answering anything but 2xx, or not answering, is a transient failure: the host
 * retries with the manifest's backoff. A payload that is not a mail fails permanently.
 */

import { effectDone, log, progress, recordEffect } from 'spool:task/host@0.1.0';

/** A failure the host understands: `fail` ends the task, `retry` runs it again later. */
function failure(tag, message) {
  return { tag, val: message };
}

/** Reads and checks the payload. */
function parseMail(payload) {
  let mail;
  try {
    mail = JSON.parse(payload);
  } catch (error) {
    throw failure('fail', `payload is not JSON: ${error.message}`);
  }
  for (const field of ['service', 'from', 'subject', 'text']) {
    if (typeof mail?.[field] !== 'string') {
      throw failure('fail', `payload needs a string "${field}"`);
    }
  }
  if (!Number.isSafeInteger(mail.approval_id)) {
    throw failure('fail', 'payload needs an integer "approval_id"');
  }
  if (!Array.isArray(mail.to) || mail.to.length === 0 || mail.to.some((to) => typeof to !== 'string')) {
    throw failure('fail', 'payload needs "to": a list of addresses');
  }
  return mail;
}

/** POSTs one recipient's mail to the service; throws a `retry` unless it was accepted. */
async function send(mail, to, key) {
  let response;
  try {
    response = await fetch(mail.service, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({ from: mail.from, to, subject: mail.subject, text: mail.text }),
    });
  } catch (error) {
    throw failure('retry', `the mail service at ${mail.service} did not answer: ${error?.message ?? error}`);
  }
  if (!response.ok) {
    const body = await response.text();
    throw failure('retry', `the mail service answered ${response.status} for ${to}: ${body}`);
  }
}

/** The world's export: one attempt. */
export async function handle(task, payload) {
  const mail = parseMail(payload);
  log('info', `approval ${mail.approval_id}: ${mail.to.length} mails, attempt ${task.attempt}`);
  const sent = [];
  const alreadySent = [];
  for (const [index, to] of mail.to.entries()) {
    const key = `mail:${mail.approval_id}:${to}`;
    if (effectDone(key)) {
      log('info', `${to}: already sent (${key}), not sending again`);
      alreadySent.push(to);
    } else {
      await send(mail, to, key);
      recordEffect(key);
      log('info', `${to}: sent (${key})`);
      sent.push(to);
    }
    progress(Math.round((100 * (index + 1)) / mail.to.length), `${index + 1} of ${mail.to.length} mails`);
  }
  return JSON.stringify({ sent, already_sent: alreadySent });
}

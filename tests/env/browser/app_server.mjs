// A stand-in for a web application's own server, on its own origin: it serves the test page
// (page.js bundled with the A2A JS SDK by esbuild) and mints each visitor a short-lived ES256
// JWT with jose, as an application's backend would. Usage: node app_server.mjs KEY_FILE LIFETIME
// writes the public key the gateway verifies with to KEY_FILE, then prints {"port": N}.
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import * as esbuild from 'esbuild';

globalThis.crypto ??= (await import('node:crypto')).webcrypto;
const { SignJWT, exportSPKI, generateKeyPair } = await import('jose');

const [keyFile, lifetime] = process.argv.slice(2);
const here = path.dirname(fileURLToPath(import.meta.url));
const built = await esbuild.build({
  entryPoints: [path.join(here, 'page.js')], bundle: true, format: 'esm', platform: 'browser',
  target: 'chrome110', write: false, logLevel: 'error',
});
const script = built.outputFiles[0].contents;
const { publicKey, privateKey } = await generateKeyPair('ES256', { extractable: true });
fs.writeFileSync(keyFile, await exportSPKI(publicKey));

// Each user's token holds the task methods the page calls, never murmur.WatchSession.
const SCOPE = 'SendStreamingMessage SubscribeToTask GetTask';
const PAGE = '<!doctype html><meta charset="utf-8"><title>watcher</title><script type="module" src="/page.js"></script>';

const server = http.createServer(async (request, response) => {
  const url = new URL(request.url, 'http://app');
  if (request.method === 'GET' && url.pathname === '/') {
    response.writeHead(200, { 'content-type': 'text/html' }).end(PAGE);
  } else if (request.method === 'GET' && url.pathname === '/page.js') {
    response.writeHead(200, { 'content-type': 'text/javascript' }).end(script);
  } else if (request.method === 'POST' && url.pathname === '/token') {
    const exp = Math.floor(Date.now() / 1000) + Number(lifetime);
    const token = await new SignJWT({ scope: SCOPE }).setProtectedHeader({ alg: 'ES256' })
      .setSubject('user-42').setIssuedAt().setExpirationTime(exp).sign(privateKey);
    response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ token, exp }));
  } else {
    response.writeHead(404).end();
  }
});
server.listen(0, '127.0.0.2', () => console.log(JSON.stringify({ port: server.address().port })));

// A real OpenID Connect provider for the tests: panva's `oidc-provider` (npm), certified by the
// OpenID Foundation, configured for the client credentials grant with JWT access tokens for a
// resource (RFC 8707 resource indicators; RFC 9068 access tokens).
//
//   node oidc_provider.mjs            -> prints one JSON line {"issuer": "http://127.0.0.1:PORT"}
//                                        on stdout once listening, then serves until killed.
//
// Clients (all with secret "secret-<client id>", client_secret_basic or _post):
//   coremetry-viewer  realm_access.roles = ["offline_access", "coremetry-viewers"]   RS256
//   coremetry-admin   realm_access.roles = ["coremetry-admins"]                     ES256
//   coremetry-norole  realm_access.roles = ["offline_access"]                       RS256
// The role claim has Keycloak's shape, mapped to Coremetry roles by the test's [auth.oidc].
//
// Test hook (not part of the provider): a token request with header
// `x-test-clock-offset-s: N` is served with the provider's clock N seconds off, so a test can
// get a token that is already expired (or not yet valid) without waiting.
import { createServer } from 'node:http';
import { generateKeyPairSync } from 'node:crypto';
import Provider from 'oidc-provider';

const ROLES = {
  'coremetry-viewer': ['offline_access', 'coremetry-viewers'],
  'coremetry-admin': ['coremetry-admins'],
  'coremetry-norole': ['offline_access'],
};
const ALG = { 'coremetry-admin': 'ES256' };

const realNow = Date.now.bind(Date);
let clockOffsetMs = 0;
Date.now = () => realNow() + clockOffsetMs;

const jwk = (type, options) => {
  const { privateKey } = generateKeyPairSync(type, options);
  return privateKey.export({ format: 'jwk' });
};
const keys = [
  { ...jwk('rsa', { modulusLength: 2048 }), kid: 'rsa-1', use: 'sig', alg: 'RS256' },
  { ...jwk('ec', { namedCurve: 'P-256' }), kid: 'ec-1', use: 'sig', alg: 'ES256' },
];

const server = createServer();
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  jwks: { keys },
  scopes: ['openid', 'offline_access', 'mcp'],
  clients: Object.keys(ROLES).map((clientId) => ({
    client_id: clientId,
    client_secret: `secret-${clientId}`,
    grant_types: ['client_credentials'],
    redirect_uris: [],
    response_types: [],
    scope: 'mcp',
  })),
  features: {
    clientCredentials: { enabled: true },
    devInteractions: { enabled: false },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, resourceIndicator, client) => ({
        scope: 'mcp',
        audience: resourceIndicator,
        accessTokenTTL: 300,
        accessTokenFormat: 'jwt',
        jwt: { sign: { alg: ALG[client.clientId] ?? 'RS256' } },
      }),
    },
  },
  extraTokenClaims: (ctx, token) => ({
    realm_access: { roles: ROLES[token.clientId] ?? [] },
  }),
});
provider.use(async (ctx, next) => {
  const offset = Number(ctx.get('x-test-clock-offset-s') || 0);
  clockOffsetMs = offset * 1000;
  try {
    await next();
  } finally {
    clockOffsetMs = 0;
  }
});
server.on('request', provider.callback());
process.stdout.write(`${JSON.stringify({ issuer })}\n`);

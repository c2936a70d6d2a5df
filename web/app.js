// promptcache's page: the tabs and the model line; each panel lives in a module of its own
// (util.js holds the API helper and the key).
import { state, apiJson, fmtBytes } from './util.js';
import { initChat } from './chat.js';
import { initTree, refreshTree } from './tree.js';
import { initSchemas, refreshSchemas } from './schemas.js';
import { initMetrics } from './metrics.js';
import { initSavings } from './savings.js';

// Tabs: arrow keys move between them (WAI-ARIA tabs pattern), Enter/click shows the panel.
const onShow = { tree: () => refreshTree(), schemas: () => refreshSchemas() };
function initTabs() {
  const tabs = [...document.querySelectorAll('[role=tab]')];
  const show = (tab) => {
    for (const t of tabs) {
      const on = t === tab;
      t.setAttribute('aria-selected', on);
      t.tabIndex = on ? 0 : -1;
      document.getElementById(t.getAttribute('aria-controls')).hidden = !on;
    }
    onShow[tab.id.slice(4)]?.();
  };
  tabs.forEach((t, i) => {
    t.addEventListener('click', () => show(t));
    t.addEventListener('keydown', (e) => {
      const d = e.key === 'ArrowRight' ? 1 : e.key === 'ArrowLeft' ? -1 : 0;
      if (!d) return;
      const next = tabs[(i + d + tabs.length) % tabs.length];
      next.focus();
      show(next);
    });
  });
}

async function loadModel() {
  const j = await apiJson('/v1/models');
  const m = j.data[0];
  state.model = m.id;
  state.meta = m.meta;
  const meta = m.meta;
  document.getElementById('model-info').textContent =
      `${m.id} (${meta.name}) · context ${meta.context_length} · ${meta.chat_format} chat · ` +
      `blocks of ${meta.cache_block_tokens} tokens · ${fmtBytes(meta.kv_bytes_per_token)}/token K/V`;
}

async function main() {
  initTabs();
  // Whether the API needs a key, asked without a 401 (which the console would log as an error).
  const cfg = await fetch('/ui/config.json').then((r) => r.json()).catch(() => ({}));
  state.keyRequired = !!cfg.api_key_required;
  try {
    await loadModel();
  } catch (e) {
    document.getElementById('model-info').textContent = 'cannot reach the server: ' + e.message;
  }
  initChat();
  initTree();
  initSchemas();
  initMetrics();
  initSavings();
  document.body.dataset.ready = '1';
}

main();

// gpupoold's dashboard: polls the daemon's JSON API and draws one Chart.js chart per GPU
// (utilisation and memory over the last hour), the jobs holding each GPU and the queue.
// Data from the daemon (job names, users) only ever goes into textContent.
'use strict';

const POLL_MS = 2000;
// Minutes shown: ?minutes=N (1 to 1440), an hour by default.
const WINDOW_MIN = Math.min(1440, Math.max(1, Number(new URLSearchParams(location.search).get('minutes')) || 60));
const cards = new Map();  // GPU index -> {card, chart, series}
let lastSampleTime = 0;
let drawn = 0;

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

async function getJson(path) {
  const response = await fetch(path, {cache: 'no-store'});
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

// 24-hour "14:03:07" in the browser's time zone, as the command line shows times.
function clockText(unixSeconds) {
  const t = new Date(unixSeconds * 1000);
  return [t.getHours(), t.getMinutes(), t.getSeconds()].map((n) => String(n).padStart(2, '0')).join(':');
}

// What the daemon's private_data lets the page know of a job's name.
function jobName(job) {
  return job.private ? '(private)' : job.name;
}

// A job as every gpupool view names it: "job 12 (alice, trainer)".
function jobLabel(job) {
  return `job ${job.id} (${job.user}, ${jobName(job)})`;
}

function fmt(value, digits, unit) {
  return value === null || value === undefined ? 'n/a' : `${Number(value).toFixed(digits)}${unit}`;
}

// Marks the page once every chart has drawn: headless tests read these attributes.
const drawnMarker = {
  id: 'gpupoolDrawn',
  afterRender(chart) {
    if (chart.canvas.dataset.rendered !== '1') {
      chart.canvas.dataset.rendered = '1';
      drawn += 1;
      document.body.dataset.chartsRendered = String(drawn);
    }
  },
};

function makeCard(gpu) {
  const card = element('article', 'card');
  card.dataset.gpu = gpu.index;
  const title = element('h3');
  title.append(element('span', null, `GPU ${gpu.index} · ${gpu.name}`), element('span', 'badges'));
  const stats = element('div', 'stats');
  const holder = element('div', 'holder');
  const canvas = element('canvas');
  // Chart.js sizes the canvas to its parent: a box of fixed height, or the chart grows unbounded.
  const plot = element('div', 'plot');
  plot.append(canvas);
  card.append(title, stats, holder, plot);
  document.getElementById('gpus').append(card);
  const series = {util: [], mem: [], sm: []};
  const chart = new Chart(canvas.getContext('2d'), {
    type: 'line',
    data: {datasets: [
      {label: 'utilisation %', data: [], borderColor: '#2563eb', backgroundColor: 'rgba(37,99,235,0.12)',
       fill: true, borderWidth: 1.5},
      {label: 'memory used %', data: [], borderColor: '#db2777', borderWidth: 1.5},
      // Only GPUs with profiling counters (Hopper on) report SM activity: the others draw no line.
      {label: 'SM active %', data: [], borderColor: '#16a34a', borderWidth: 1.5},
    ]},
    options: {
      animation: false, parsing: false, normalized: true, responsive: true, maintainAspectRatio: false,
      elements: {point: {radius: 0}, line: {tension: 0}},
      interaction: {mode: 'nearest', axis: 'x', intersect: false},
      scales: {
        x: {type: 'linear', min: -WINDOW_MIN, max: 0, title: {display: true, text: 'minutes ago'},
            ticks: {callback: (v) => `${-v}`}},
        y: {min: 0, max: 100, ticks: {stepSize: 25}},
      },
      plugins: {legend: {labels: {boxWidth: 12}}, decimation: {enabled: true, algorithm: 'min-max'}},
    },
    plugins: [drawnMarker],
  });
  const entry = {card, chart, series, stats, holder, badges: title.lastChild, gpu};
  cards.set(gpu.index, entry);
  return entry;
}

function appendHistory(history) {
  for (const g of history.gpus) {
    const entry = cards.get(g.index);
    if (!entry) continue;
    for (let i = 0; i < g.time.length; i++) {
      const t = g.time[i];
      if (t <= lastSampleTime) continue;
      entry.series.util.push([t, g.utilization_gpu[i]]);
      const used = g.memory_used_mib[i];
      entry.series.mem.push([t, used === null || !g.memory_total_mib ? null : (100 * used) / g.memory_total_mib]);
      const sm = g.sm_active[i];
      entry.series.sm.push([t, sm === null ? null : 100 * sm]);
    }
  }
  for (const g of history.gpus) {
    if (g.time.length) lastSampleTime = Math.max(lastSampleTime, g.time[g.time.length - 1]);
  }
}

function redraw(now) {
  const oldest = now - WINDOW_MIN * 60;
  for (const entry of cards.values()) {
    for (const key of ['util', 'mem', 'sm']) {
      const s = entry.series[key];
      while (s.length && s[0][0] < oldest) s.shift();
    }
    const toPoints = (s) => s.map(([t, y]) => ({x: (t - now) / 60, y}));
    entry.chart.data.datasets[0].data = toPoints(entry.series.util);
    entry.chart.data.datasets[1].data = toPoints(entry.series.mem);
    entry.chart.data.datasets[2].data = toPoints(entry.series.sm);
    entry.chart.update('none');
  }
}

function showGpus(state, jobs) {
  document.getElementById('host').textContent = state.hostname;
  const idleJobs = new Set(jobs.jobs.filter((j) => j.idle).map((j) => j.id));
  for (const gpu of state.gpus) {
    const entry = cards.get(gpu.index) || makeCard(gpu);
    const s = gpu.sample || {};
    const mem = s.memory_used_mib === null || s.memory_used_mib === undefined ? 'n/a'
      : `${(s.memory_used_mib / 1024).toFixed(1)} / ${gpu.memory_total_mib === null ? '?' : (gpu.memory_total_mib / 1024).toFixed(0)} GiB`;
    const sm = s.sm_active === null || s.sm_active === undefined ? '' : ` · SM ${fmt(100 * s.sm_active, 0, ' %')}`;
    entry.stats.textContent = `util ${fmt(s.utilization_gpu, 0, ' %')}${sm} · memory ${mem} · ` +
      `${fmt(s.temperature_c, 0, ' °C')} · ${fmt(s.power_w, 0, ' W')}`;
    entry.holder.replaceChildren();
    entry.badges.replaceChildren();
    if (gpu.jobs.length) {
      entry.holder.className = 'holder';
      entry.holder.textContent = gpu.jobs.map(jobLabel).join(', ');
    } else {
      entry.holder.className = 'holder free';
      entry.holder.textContent = gpu.holders || (gpu.leased || gpu.leased_mib ? 'leased' : 'free');
    }
    const idle = gpu.jobs.some((j) => idleJobs.has(j.id));
    entry.card.classList.toggle('idle', idle);
    if (idle) entry.badges.append(element('span', 'badge idle', 'idle'));
    if (gpu.outside_busy) entry.badges.append(element('span', 'badge outside', 'used outside gpupool'));
    if (gpu.quarantined) entry.badges.append(element('span', 'badge quarantined', 'quarantined'));
  }
}

function showQueue(jobs) {
  const c = jobs.counts;
  document.getElementById('summary').textContent =
    `${c.running} running · ${c.queued} queued · ${c.held} held${jobs.drained ? ' · drained' : ''}`;
  const body = document.querySelector('#queue tbody');
  body.replaceChildren();
  for (const job of jobs.jobs) {
    const row = element('tr', job.state);
    row.dataset.job = job.id;
    const since = job.start_time ?? job.submit_time;
    const note = job.idle ? `idle since ${clockText(job.idle_since)}` : job.reason;
    for (const text of [job.id, jobName(job), job.user, job.state,
                        job.gpus.length ? job.gpus.join(',') : `${job.gpu_count}${job.mem_mib ? ` × ${job.mem_mib} MiB` : ''}`,
                        clockText(since), fmt(job.gpu_hours, 3, ''),
                        fmt(job.mean_utilization, 0, ' %'), note]) {
      row.append(element('td', null, String(text)));
    }
    if (job.idle) row.lastChild.append(' ', element('span', 'badge idle', 'idle'));
    body.append(row);
  }
}

async function poll(first) {
  try {
    const since = first ? `seconds=${WINDOW_MIN * 60}` : `since=${lastSampleTime}`;
    // One request per refresh: an open page holds one of the daemon's few HTTP connections, not three.
    const {gpus: state, jobs, history} = await getJson(`/api/dashboard?${since}`);
    showGpus(state, jobs);
    showQueue(jobs);
    appendHistory(history);
    redraw(history.time);
    document.body.dataset.updated = String(history.time);
  } catch (error) {
    document.getElementById('summary').textContent = `gpupoold does not answer: ${error.message}`;
  }
  setTimeout(() => poll(false), POLL_MS);
}

document.getElementById('window').textContent = WINDOW_MIN === 60 ? 'hour' : `${WINDOW_MIN} minutes`;
poll(true);

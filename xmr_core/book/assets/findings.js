// The Findings page: sort by a column (click its header), filter by text, chapter and verdict. No network.
(function () {
  const table = document.getElementById('xmr-findings-table');
  if (!table) return;
  const body = table.tBodies[0];
  const rows = Array.from(body.rows);
  const text = document.getElementById('xmr-filter-text');
  const chapter = document.getElementById('xmr-filter-chapter');
  const verdict = document.getElementById('xmr-filter-verdict');
  const count = document.getElementById('xmr-filter-count');
  function apply() {
    const words = text.value.toLowerCase();
    let shown = 0;
    for (const row of rows) {
      const ok = (!words || row.innerText.toLowerCase().includes(words)) &&
        (!chapter.value || row.dataset.chapter === chapter.value) &&
        (!verdict.value || row.dataset.verdict === verdict.value);
      row.style.display = ok ? '' : 'none';
      shown += ok;
    }
    count.textContent = shown + ' of ' + rows.length + ' claims shown';
  }
  [text, chapter, verdict].forEach(el => el.addEventListener('input', apply));
  Array.from(table.tHead.rows[0].cells).forEach((th, i) => {
    th.title = 'sort by this column';
    th.addEventListener('click', () => {
      const up = th.dataset.sorted !== 'up';
      Array.from(table.tHead.rows[0].cells).forEach(c => delete c.dataset.sorted);
      th.dataset.sorted = up ? 'up' : 'down';
      const key = r => r.cells[i].dataset.sort !== undefined ? parseFloat(r.cells[i].dataset.sort) : r.cells[i].innerText;
      rows.sort((a, b) => {
        const x = key(a), y = key(b);
        const c = (typeof x === 'number' && typeof y === 'number') ? x - y : String(x).localeCompare(String(y));
        return up ? c : -c;
      });
      rows.forEach(r => body.appendChild(r));
    });
  });
  apply();
})();

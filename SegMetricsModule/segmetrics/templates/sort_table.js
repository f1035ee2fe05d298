// Sorts a table.sortable by the clicked column (numbers numerically, text alphabetically); no libraries.
document.querySelectorAll('table.sortable th').forEach(function (th) {
  th.style.cursor = 'pointer';
  th.addEventListener('click', function () {
    var table = th.closest('table'), col = th.cellIndex, rows = Array.from(table.querySelectorAll('tr')).slice(1);
    var down = th.dataset.down !== '1'; th.dataset.down = down ? '1' : '0';
    function key(row) { var t = row.children[col].textContent, n = parseFloat(t);
      return t === 'inf' ? Infinity : (isNaN(n) ? t : n); }
    rows.sort(function (a, b) { var x = key(a), y = key(b);
      var c = (typeof x === typeof y) ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === 'number' ? -1 : 1);
      return down ? c : -c; });
    rows.forEach(function (row) { table.appendChild(row); });
  });
});

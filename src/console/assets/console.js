// Progressive enhancement only: every page reads the same without it.
// Shows each UTC time's local equivalent as its tooltip.
document.querySelectorAll("time[datetime]").forEach(function (t) {
  var d = new Date(t.getAttribute("datetime"));
  if (!isNaN(d)) { t.title = d.toLocaleString(); }
});

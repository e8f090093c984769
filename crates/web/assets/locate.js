// "Use my location" on the nearby-parks page: fills the form from the browser's location and
// sends it. The only script in the front office; without it the typed location still works.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const button = document.getElementById("locate");
  const form = document.getElementById("where");
  if (!button || !form || !navigator.geolocation) return;
  button.hidden = false;
  button.addEventListener("click", () => {
    const status = document.getElementById("locate-status");
    status.textContent = "Finding where you are…";
    navigator.geolocation.getCurrentPosition(
      (p) => {
        form.elements.lat.value = p.coords.latitude.toFixed(6);
        form.elements.lon.value = p.coords.longitude.toFixed(6);
        form.submit();
      },
      (e) => { status.textContent = "Your location is not available (" + e.message + "). Type it instead."; },
      { enableHighAccuracy: false, timeout: 10000, maximumAge: 60000 },
    );
  });
});

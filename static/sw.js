// Review Queue's service worker: it makes the app installable and shows Web Push notifications.
// It caches nothing: every page is the server's, behind sign-in, and works without this worker.
"use strict";

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));
// A fetch handler that lets every request through to the network, unchanged.
self.addEventListener("fetch", () => {});

self.addEventListener("push", (event) => {
  let data = {};
  try {
    data = event.data ? event.data.json() : {};
  } catch (e) {
    data = {};
  }
  const title = "Review needed";
  const options = {
    body: typeof data.title === "string" ? data.title : "A hold is waiting for a decision.",
    tag: typeof data.hold === "string" ? data.hold : undefined,
    data: { url: typeof data.url === "string" ? data.url : "/" },
  };
  event.waitUntil(self.registration.showNotification(title, options));
});

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  const target = new URL(event.notification.data.url, self.location.origin);
  // Only pages of this app: a payload cannot send a click elsewhere.
  const url = target.origin === self.location.origin ? target.href : "/";
  event.waitUntil(self.clients.openWindow(url));
});

//! The search page (`GET /`) in a real browser: headless Chromium driven over WebDriver
//! (chromedriver) against `lexlip serve --model models/emoji-tiny` with the twelve fixture emoji
//! indexed over HTTP. A typed query finds its emoji and the card shows the matched terms; a
//! query from the URL runs on load; an image chosen through the file input finds texts; the
//! "What the model sees" tab draws a word cloud; an API error shows as a message; and no script
//! error reaches the browser console. Screenshots of each state go to
//! `target/browser-screenshots/` (`docs/search-page.png` shows the demo instead:
//! `scripts/docs-screenshot.sh`).
//!
//! Needs Chromium and chromedriver: on PATH (`chromium`/`chromedriver`; Debian:
//! `apt-get install chromium chromium-driver`, as `.ci/run` does) or named by `$CHROME` and
//! `$CHROMEDRIVER`. Without them the test says so and passes as skipped.

use std::fmt::Display;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use lexlip_tests::{EMOJI, Server, emoji_model, emoji_png, index_emoji};
use serde_json::{Value, json};

/// The longest any one step may take (a cold browser on a slow, shared machine); waits poll.
const STEP: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(100);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_search_page_works_in_chromium() {
    let (Some(chrome), Some(chromedriver)) = (
        tool("CHROME", &["chromium", "chromium-browser", "google-chrome"]),
        tool("CHROMEDRIVER", &["chromedriver"]),
    ) else {
        eprintln!(
            "SKIPPED: the browser test needs Chromium and chromedriver on PATH (or $CHROME and \
             $CHROMEDRIVER naming them). Debian/Ubuntu: `sudo apt-get install chromium \
             chromium-driver`; other systems: a Chrome or Chromium with the chromedriver of the \
             same version."
        );
        return;
    };
    let started = Instant::now();
    let data = tempfile::tempdir().unwrap();
    let server = Server::with_model(data.path(), &emoji_model());
    eprintln!("server up after {:.1?}", started.elapsed());
    index_emoji(&server, "emoji");
    eprintln!("emoji indexed after {:.1?}", started.elapsed());
    let driver = Chromedriver::start(&chromedriver);
    let client = ClientBuilder::new(HttpConnector::new())
        .capabilities(capabilities(&chrome))
        .connect(&driver.url)
        .await
        .expect("a Chromium session from chromedriver");
    let page = Page {
        client,
        base: server.url(""),
        shots: screenshot_dir(),
    };
    page.viewport(1200, 800).await;
    eprintln!("browser ready after {:.1?}", started.elapsed());

    // The page lists the collections and selects the one there is.
    page.goto("/").await;
    page.wait(
        "the collection list has loaded",
        "return [...document.querySelectorAll('#collection option')]
             .some((o) => o.value === 'emoji' && o.selected)",
    )
    .await;
    page.console_is_clean(&[]).await;
    // The page says which model encodes the queries and what it knows.
    let card = page
        .wait_text(
            "the model card",
            "const m = document.getElementById('model-card');
             return !m.hidden && m.textContent",
        )
        .await;
    page.ensure(
        card.contains("emoji-tiny")
            && card.contains("not photographs")
            && card.contains("how it was made"),
        format!("the model's name, its one-line card and a link to its README: {card}"),
    )
    .await;

    // A typed text query finds its emoji first, and the card says which terms matched.
    page.search_text("a dog").await;
    let hits = page.results("the results of the text query 'a dog'").await;
    page.ensure(
        hits.iter().all(|h| h["modality"] == "image"),
        format!("a text query finds images by default: {:?}", brief(&hits)),
    )
    .await;
    let dog = position(&hits, "1f436");
    page.ensure(
        dog.is_some_and(|p| p < 3),
        format!(
            "the dog emoji among the first 3 hits for 'a dog': {:?}",
            brief(&hits)
        ),
    )
    .await;
    let terms = &hits[dog.unwrap()]["terms"];
    page.ensure(
        terms
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t.as_str().unwrap().starts_with("dog ")),
        format!("the dog emoji's card shows the matched term 'dog': {terms}"),
    )
    .await;
    page.cloud_has("#query-cloud span", "dog", "the query's word cloud")
        .await;
    let url = page.client.current_url().await.unwrap();
    page.ensure(
        url.query_pairs().any(|(k, v)| k == "q" && v == "a dog"),
        format!("the query is in the address, to share: {url}"),
    )
    .await;
    page.thumbnail_settled().await;
    // On a phone, the word cloud leaves the results on the first screen.
    page.viewport(390, 844).await;
    let cloud_bottom = page
        .run(
            "return document.getElementById('query-cloud').getBoundingClientRect().height",
            Vec::new(),
        )
        .await;
    page.ensure(
        cloud_bottom.as_f64().is_some_and(|h| h <= 100.0),
        format!("the word cloud is at most 100 px high on a phone: {cloud_bottom}"),
    )
    .await;
    page.screenshot("1-text-query-phone").await;
    page.viewport(1200, 800).await;
    page.screenshot("1-text-query").await;
    page.console_is_clean(&[]).await;

    // An image chosen through the file input, after that text query, finds texts (its label
    // among the first).
    let (file, label) = EMOJI[1];
    page.mark_results_seen().await;
    page.choose_file("file", &emoji_png(file)).await;
    let hits = page.results("the results of the image query").await;
    eprintln!("{file}.png → {:?}", brief(&hits));
    page.ensure(
        hits.iter().all(|h| h["modality"] == "text"),
        format!("an image query finds texts: {:?}", brief(&hits)),
    )
    .await;
    page.ensure(
        page.value("target").await == "text",
        "choosing an image switched the target to texts",
    )
    .await;
    let want = format!("text:{file}");
    page.ensure(
        position(&hits, &want).is_some_and(|p| p < 3),
        format!(
            "'{label}' among the first 3 texts for {file}.png: {:?}",
            brief(&hits)
        ),
    )
    .await;
    page.wait(
        "the query image is previewed",
        "return !document.getElementById('drop-preview').hidden
             && document.getElementById('query-image').src.startsWith('blob:')",
    )
    .await;
    page.screenshot("2-image-query").await;
    page.console_is_clean(&[]).await;

    // A query in the address runs when the page opens.
    page.goto("/?c=emoji&q=frog").await;
    let hits = page
        .results("the results of the query in the address")
        .await;
    eprintln!("'frog' (from the address) → {:?}", brief(&hits));
    page.ensure(
        page.value("q").await == "frog",
        "the query box shows the query from the address",
    )
    .await;
    page.console_is_clean(&[]).await;

    // A collection of texts only: a text query finds texts without choosing "Find".
    let (status, body) = server.call("PUT", "/v1/collections/notes", None);
    assert_eq!(status, 201, "{body}");
    let notes = vec![
        json!({"id": "n1", "modality": "text", "text": "a puppy playing outside with a dog"}),
        json!({"id": "n2", "modality": "text", "text": "a red apple on a table"}),
    ];
    server.add("notes", notes);
    page.goto("/?c=notes&q=puppy dog").await;
    let hits = page.results("the results in a collection of texts").await;
    page.ensure(
        !hits.is_empty() && hits.iter().all(|h| h["modality"] == "text"),
        format!(
            "a text query finds the texts a text-only collection holds: {:?}",
            brief(&hits)
        ),
    )
    .await;
    page.ensure(
        page.value("target").await.is_empty(),
        "Find defaults to all in a collection without images",
    )
    .await;
    page.console_is_clean(&[]).await;

    // What the address asks for and the page cannot do is said, and the search still runs.
    page.goto("/?c=nosuch&m=dense&q=dog").await;
    page.results("the results with an unknown collection in the address")
        .await;
    let notice = page.message("a notice about the address", "info").await;
    page.ensure(
        notice.contains("no collection “nosuch”")
            && notice.contains("emoji, notes")
            && notice.contains("Mode “dense” needs dense vectors"),
        format!(
            "the notice names the unknown collection, the existing ones and the mode: {notice}"
        ),
    )
    .await;

    // An empty result says which filter emptied it.
    page.goto("/?c=emoji&q=dog&f=split=nowhere").await;
    page.wait(
        "an empty result that names the filter",
        "const e = document.querySelector('#results li.empty');
         return !!e && /metadata split=nowhere/.test(e.textContent) && e.textContent",
    )
    .await;
    page.console_is_clean(&[]).await;

    // "What the model sees": the lexicon of a text as a word cloud and a table.
    page.click("#tab-lexicon").await;
    page.wait(
        "the lexicon view is shown",
        "return !document.getElementById('view-lexicon').hidden
             && document.getElementById('view-search').hidden",
    )
    .await;
    page.type_into("lex-text", "a cat face").await;
    page.click("#lexicon-form button[type=submit]").await;
    page.wait(
        "the lexicon's word cloud is drawn",
        "return document.querySelectorAll('#lex-cloud span').length > 0
             && !document.getElementById('lex-table').hidden
             && /non-zero terms/.test(document.getElementById('lex-status').textContent)",
    )
    .await;
    let cloud = page
        .cloud_has("#lex-cloud span", "cat", "the lexicon of 'a cat face'")
        .await;
    page.lexicon_table_is_heaviest_first(&cloud).await;
    page.screenshot("3-lexicon").await;
    // An image's lexicon has more terms than the table shows: the heaviest ones.
    page.choose_file("lex-file", &emoji_png(EMOJI[3].0)).await;
    page.click("#lexicon-form button[type=submit]").await;
    page.wait(
        "the image's lexicon is drawn",
        "return /non-zero terms for the image/.test(document.getElementById('lex-status').textContent)
             && !document.getElementById('lex-image').hidden",
    )
    .await;
    let cloud = page.texts("#lex-cloud span").await;
    page.lexicon_table_is_heaviest_first(&cloud).await;
    page.console_is_clean(&[]).await;

    // An API error (the collection was deleted under the page) shows as a message.
    page.click("#tab-search").await;
    let (status, body) = server.call("DELETE", "/v1/collections/emoji", None);
    assert!(status == 200 || status == 204, "{status} {body}");
    page.search_text("fire").await;
    let message = page.message("an error message is shown", "error").await;
    eprintln!("error message: {message}");
    page.ensure(
        page.texts("#results li").await.is_empty(),
        "the results are cleared on an error",
    )
    .await;
    page.screenshot("4-error").await;
    // The failed search is expected here: Chromium logs the 404 response as a resource error.
    page.console_is_clean(&["/v1/collections/emoji/search"])
        .await;

    page.client.close().await.unwrap();
    drop(driver);
    server.stop();
    eprintln!(
        "browser test took {:.1?}; screenshots in {}",
        started.elapsed(),
        page.shots.display()
    );
}

/// `$VAR`, else the first of `names` on PATH.
fn tool(var: &str, names: &[&str]) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(var) {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

fn capabilities(chrome: &Path) -> serde_json::Map<String, Value> {
    let caps = json!({
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": chrome,
            "args": [
                "--headless=new",
                // CI runs as root in a container: no sandbox there, and a small /dev/shm.
                "--no-sandbox",
                "--disable-dev-shm-usage",
                "--window-size=1200,800",
                "--force-device-scale-factor=1",
                "--hide-scrollbars",
                "--lang=en-US",
            ],
        },
        // The console (script errors, failed loads) for `Page::console_is_clean`.
        "goog:loggingPrefs": {"browser": "ALL"},
    });
    match caps {
        Value::Object(map) => map,
        _ => unreachable!(),
    }
}

/// `TARGET/browser-screenshots` (this test runs from TARGET/PROFILE/deps).
fn screenshot_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let target = exe.ancestors().nth(3).expect("TARGET/PROFILE/deps/EXE");
    let dir = target.join("browser-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn position(hits: &[Value], id: &str) -> Option<usize> {
    hits.iter().position(|h| h["id"] == id)
}

/// Each hit as "id (modality)", to show in messages.
fn brief(hits: &[Value]) -> Vec<String> {
    hits.iter()
        .map(|h| {
            format!(
                "{} ({})",
                h["id"].as_str().unwrap_or("?"),
                h["modality"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

/// chromedriver on a free loopback port, in a process group of its own: dropping it (after a
/// panic too) kills the group, so the browser it started goes with it.
struct Chromedriver {
    child: Child,
    url: String,
}

impl Chromedriver {
    fn start(bin: &Path) -> Chromedriver {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(bin)
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let mut driver = Chromedriver {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + STEP;
        loop {
            let ready = ureq::get(&format!("{}/status", driver.url))
                .timeout(Duration::from_secs(5))
                .call()
                .ok()
                .and_then(|r| r.into_json::<Value>().ok())
                .is_some_and(|v| v["value"]["ready"] == true);
            if ready {
                return driver;
            }
            if let Some(status) = driver.child.try_wait().unwrap() {
                panic!("chromedriver exited with {status} before it was ready");
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver not ready in {STEP:?}"
            );
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.wait();
    }
}

/// Chromium's console since the last call: chromedriver's log endpoint (`goog:loggingPrefs`).
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(r#"{"type": "browser"}"#.into()))
    }
}

/// The page in the browser, with waits that poll and failures that leave a screenshot.
struct Page {
    client: Client,
    base: String,
    shots: PathBuf,
}

/// What `Page::results` reads off each new result card (null while there are none; the
/// message if the search failed).
const READ_RESULTS: &str = "
    const message = document.getElementById('message');
    if (!message.hidden && message.className === 'error') return {error: message.textContent};
    const status = document.getElementById('status').textContent;
    const cards = [...document.querySelectorAll('#results li.card')];
    if (status.startsWith('Searching') || cards.length === 0 || cards.some((c) => c.dataset.seen)) {
        return null;
    }
    return cards.map((c) => ({
        modality: c.classList.contains('image') ? 'image' : 'text',
        id: c.querySelector('.meta').textContent.split(' · ')[1],
        title: c.querySelector('.title').textContent,
        terms: [...c.querySelectorAll('ul.terms li')].map((li) => li.textContent),
    }));";

impl Page {
    async fn goto(&self, path: &str) {
        self.client
            .goto(&format!("{}{path}", self.base))
            .await
            .unwrap_or_else(|e| panic!("opening {path}: {e}"));
    }

    /// Polls `script` (a function body) until it returns something other than null, false, 0
    /// or "", and returns that; fails after `STEP`.
    async fn wait(&self, what: &str, script: &str) -> Value {
        let deadline = Instant::now() + STEP;
        loop {
            let value = self
                .client
                .execute(script, Vec::new())
                .await
                .unwrap_or_else(|e| panic!("checking whether {what}: {e}"));
            let done = match &value {
                Value::Null | Value::Bool(false) => false,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if done {
                return value;
            }
            if Instant::now() > deadline {
                panic!("{}", self.failure(format!("timed out: {what}")).await);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// [`Page::wait`] for a text.
    async fn wait_text(&self, what: &str, script: &str) -> String {
        let text = self.wait(what, script).await;
        text.as_str().unwrap_or_default().to_string()
    }

    /// Waits for the message line to show a message of `class` (`info`, `error`); its text.
    async fn message(&self, what: &str, class: &str) -> String {
        let script = format!(
            "const m = document.getElementById('message');
             return !m.hidden && m.className === '{class}' && m.textContent.trim()"
        );
        self.wait_text(what, &script).await
    }

    /// Runs `script` (a function body) with `args` in the page; what it returns.
    async fn run(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute(script, args)
            .await
            .unwrap_or_else(|e| panic!("running {script}: {e}"))
    }

    /// Sizes the window so that the page gets `width`×`height` pixels (screenshots are those).
    async fn viewport(&self, width: u32, height: u32) {
        let chrome = self
            .run(
                "return [window.outerWidth - window.innerWidth, window.outerHeight - window.innerHeight]",
                Vec::new(),
            )
            .await;
        let extra = |i: usize| chrome[i].as_u64().unwrap_or(0) as u32;
        self.client
            .set_window_size(width + extra(0), height + extra(1))
            .await
            .unwrap();
    }

    async fn ensure(&self, ok: bool, what: impl Display) {
        if !ok {
            panic!("{}", self.failure(what).await);
        }
    }

    /// A failure message with what the page shows, and a screenshot of it.
    async fn failure(&self, what: impl Display) -> String {
        let state = self
            .client
            .execute(
                "return {url: location.href,
                         message: document.getElementById('message').textContent,
                         status: document.getElementById('status').textContent}",
                Vec::new(),
            )
            .await
            .map_or_else(|e| e.to_string(), |v| v.to_string());
        let shot = self.screenshot("failure").await;
        format!("{what}\n  page: {state}\n  screenshot: {}", shot.display())
    }

    async fn screenshot(&self, name: &str) -> PathBuf {
        let path = self.shots.join(format!("{name}.png"));
        match self.client.screenshot().await {
            Ok(png) => std::fs::write(&path, png).unwrap(),
            Err(e) => eprintln!("no screenshot {name}: {e}"),
        }
        path
    }

    /// Clicks the element the CSS selector `css` finds.
    async fn click(&self, css: &str) {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .click()
            .await
            .unwrap_or_else(|e| panic!("clicking {css}: {e}"));
    }

    /// Chooses `file` in the file input `#id`, as a user picking it would.
    async fn choose_file(&self, id: &str, file: &Path) {
        self.client
            .find(Locator::Id(id))
            .await
            .unwrap_or_else(|e| panic!("#{id}: {e}"))
            .send_keys(file.to_str().unwrap())
            .await
            .unwrap_or_else(|e| panic!("choosing {} in #{id}: {e}", file.display()));
    }

    async fn type_into(&self, id: &str, text: &str) {
        let input = self
            .client
            .find(Locator::Id(id))
            .await
            .unwrap_or_else(|e| panic!("#{id}: {e}"));
        input.clear().await.unwrap();
        input.send_keys(text).await.unwrap();
    }

    async fn value(&self, id: &str) -> String {
        let script = "return document.getElementById(arguments[0]).value";
        let value = self.run(script, vec![json!(id)]).await;
        value.as_str().unwrap_or_default().to_string()
    }

    /// The text of each element `selector` matches.
    async fn texts(&self, selector: &str) -> Vec<String> {
        let script =
            "return [...document.querySelectorAll(arguments[0])].map((e) => e.textContent)";
        serde_json::from_value(self.run(script, vec![json!(selector)]).await).unwrap()
    }

    /// Ensures that the word cloud `selector` (its words' elements) shows `word`; its words.
    async fn cloud_has(&self, selector: &str, word: &str, cloud_name: &str) -> Vec<String> {
        let cloud = self.texts(selector).await;
        self.ensure(
            cloud.iter().any(|t| t == word),
            format!("{cloud_name} has '{word}': {cloud:?}"),
        )
        .await;
        cloud
    }

    /// Types `text` into the query box and submits it.
    async fn search_text(&self, text: &str) {
        self.mark_results_seen().await;
        self.type_into("q", text).await;
        self.click("#go").await;
    }

    /// Marks the cards on the page, so that `results` waits for the next ones.
    async fn mark_results_seen(&self) {
        self.run(
            "document.querySelectorAll('#results li').forEach((li) => { li.dataset.seen = '1' })",
            Vec::new(),
        )
        .await;
    }

    /// Waits for new result cards; returns each card's modality, id, title and matched terms.
    async fn results(&self, what: &str) -> Vec<Value> {
        match self.wait(what, READ_RESULTS).await {
            Value::Array(hits) => hits,
            other => panic!("{}", self.failure(format!("{what}: {other}")).await),
        }
    }

    /// The lexicon table lists terms by weight, heaviest first, as the cloud (`cloud`) does; it
    /// shows up to 50 terms, the cloud up to 48.
    async fn lexicon_table_is_heaviest_first(&self, cloud: &[String]) {
        let rows = self
            .run(
                "return [...document.querySelectorAll('#lex-table tbody tr')]
                     .map((tr) => [tr.cells[0].textContent, Number(tr.cells[1].textContent)])",
                Vec::new(),
            )
            .await;
        let rows: Vec<(String, f64)> = serde_json::from_value(rows).unwrap();
        self.ensure(
            !rows.is_empty()
                && rows.len() <= 50
                && rows.len() >= cloud.len().min(50)
                && rows.windows(2).all(|w| w[0].1 >= w[1].1)
                && rows[0].0 == cloud[0],
            format!("the lexicon table, heaviest first like the cloud {cloud:?}: {rows:?}"),
        )
        .await;
    }

    /// Waits until the first image card shows its thumbnail (stored at indexing, served by
    /// `GET …/documents/{id}/thumbnail`), so that screenshots show what a user sees.
    async fn thumbnail_settled(&self) {
        self.wait(
            "the first image card shows its thumbnail",
            "const c = document.querySelector('#results li.card.image');
             const img = c && c.querySelector('img');
             return !!(img && img.complete && img.naturalWidth > 0)",
        )
        .await;
    }

    /// No error in the console since the last check: no script error, no failed request, no
    /// CSP violation. Only the failed loads whose paths `expected` names are let through.
    async fn console_is_clean(&self, expected: &[&str]) {
        let log = self
            .client
            .issue_cmd(BrowserLog)
            .await
            .expect("chromedriver's log endpoint");
        let mut seen = Vec::new();
        let errors: Vec<&Value> = log
            .as_array()
            .expect("a list of log entries")
            .iter()
            .filter(|e| e["level"] == "SEVERE")
            .filter(|e| {
                let message = e["message"].as_str().unwrap_or_default();
                let url = message.split_whitespace().next().unwrap_or_default();
                let path = url.strip_prefix(&self.base).unwrap_or(url);
                let failed_load = e["source"] == "network";
                if failed_load && expected.contains(&path) {
                    seen.push(path);
                }
                !(failed_load && expected.contains(&path))
            })
            .collect();
        self.ensure(errors.is_empty(), format!("console errors: {errors:#?}"))
            .await;
        // The expected failures were logged: the console does reach this check.
        self.ensure(
            expected.iter().all(|p| seen.contains(p)),
            format!("expected failed loads {expected:?} in the console: {log:#}"),
        )
        .await;
    }
}

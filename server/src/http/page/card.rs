//! The model card (`README.md`) as a page of its own, for the search page's "how it was made"
//! link: Markdown rendered by pulldown-cmark, with the page's style sheet and policy. HTML
//! written in the card is shown as text, never run: a card is a file anyone can ship with a
//! model.

use pulldown_cmark::{Event, Options, Parser, html};

/// The card as a complete HTML page titled `title`.
pub fn page(title: &str, markdown: &str) -> String {
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH;
    let events = Parser::new_ext(markdown, options).map(|event| match event {
        Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
        other => other,
    });
    let mut body = String::with_capacity(markdown.len() * 3 / 2);
    html::push_html(&mut body, events);
    let mut title_html = String::new();
    html::push_html(&mut title_html, std::iter::once(Event::Text(title.into())));
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title_html}</title>\n\
         <link rel=\"icon\" href=\"/assets/icon.svg\" type=\"image/svg+xml\">\n\
         <link rel=\"stylesheet\" href=\"/assets/app.css\">\n</head>\n\
         <body>\n<main class=\"model-readme\">\n<p><a href=\"/\">← search</a></p>\n{body}</main>\n\
         </body>\n</html>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::page;

    #[test]
    fn markdown_is_rendered_and_raw_html_is_text() {
        let card = "# emoji-lex\n\n| split | R@1 |\n|---|---|\n| test | 12.8 |\n\n\
                    Made with `lexlip train`.\n\n<script>alert(1)</script>\n";
        let html = page("emoji-lex <card>", card);
        assert!(html.contains("<h1>emoji-lex</h1>"), "{html}");
        assert!(
            html.contains("<table>") && html.contains("<td>12.8</td>"),
            "{html}"
        );
        assert!(html.contains("<code>lexlip train</code>"), "{html}");
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
        assert!(
            html.contains("<title>emoji-lex &lt;card&gt;</title>"),
            "{html}"
        );
    }
}

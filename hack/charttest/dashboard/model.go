// Package dashboard builds Trainyard's Grafana dashboard, shipped as
// charts/trainyard/dashboards/trainyard.json. The JSON is generated so that
// every panel follows the same conventions (datasource variable, units,
// legends, $__rate_interval) and so that queries are built from a few helpers
// instead of being copied; hack/charttest checks the committed file is current
// and that every query parses and names only metrics the binary exports.
//
// Regenerate with: cd hack/charttest && go run ./cmd/gendashboard
package dashboard

// The types below are the subset of Grafana's dashboard JSON model (schema
// version 39, Grafana 10 and later) that the dashboard uses.

// Dashboard is a Grafana dashboard.
type Dashboard struct {
	UID           string      `json:"uid"`
	Title         string      `json:"title"`
	Description   string      `json:"description"`
	Tags          []string    `json:"tags"`
	Editable      bool        `json:"editable"`
	GraphTooltip  int         `json:"graphTooltip"`
	Refresh       string      `json:"refresh"`
	SchemaVersion int         `json:"schemaVersion"`
	Time          TimeRange   `json:"time"`
	Timezone      string      `json:"timezone"`
	Annotations   Annotations `json:"annotations"`
	Templating    Templating  `json:"templating"`
	Panels        []*Panel    `json:"panels"`
	Links         []Link      `json:"links"`
	Version       int         `json:"version"`
}

// TimeRange is the default time range.
type TimeRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Annotations lists annotation queries.
type Annotations struct {
	List []Annotation `json:"list"`
}

// Annotation is Grafana's built-in annotation query.
type Annotation struct {
	BuiltIn    int        `json:"builtIn"`
	Datasource Datasource `json:"datasource"`
	Enable     bool       `json:"enable"`
	Hide       bool       `json:"hide"`
	IconColor  string     `json:"iconColor"`
	Name       string     `json:"name"`
	Type       string     `json:"type"`
}

// Link is a dashboard link.
type Link struct {
	Title       string `json:"title"`
	Type        string `json:"type"`
	URL         string `json:"url"`
	TargetBlank bool   `json:"targetBlank"`
	Icon        string `json:"icon"`
}

// Templating lists the dashboard variables.
type Templating struct {
	List []*Variable `json:"list"`
}

// Variable is a template variable.
type Variable struct {
	Name        string      `json:"name"`
	Label       string      `json:"label"`
	Description string      `json:"description,omitempty"`
	Type        string      `json:"type"`
	Query       any         `json:"query"`
	Datasource  *Datasource `json:"datasource,omitempty"`
	Definition  string      `json:"definition,omitempty"`
	Refresh     int         `json:"refresh,omitempty"`
	Sort        int         `json:"sort,omitempty"`
	Multi       bool        `json:"multi"`
	IncludeAll  bool        `json:"includeAll"`
	Hide        int         `json:"hide"`
	Current     *Current    `json:"current,omitempty"`
	Options     []Option    `json:"options"`
	Regex       string      `json:"regex,omitempty"`
}

// Current is a variable's selected value.
type Current struct {
	Selected bool `json:"selected"`
	Text     any  `json:"text"`
	Value    any  `json:"value"`
}

// Option is one choice of a custom variable.
type Option struct {
	Selected bool   `json:"selected"`
	Text     string `json:"text"`
	Value    string `json:"value"`
}

// Datasource references a data source, here always through ${datasource}.
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// GridPos places a panel on the 24-column grid.
type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// Panel is a panel or a row.
type Panel struct {
	ID              int          `json:"id"`
	Type            string       `json:"type"`
	Title           string       `json:"title"`
	Description     string       `json:"description,omitempty"`
	GridPos         GridPos      `json:"gridPos"`
	Datasource      *Datasource  `json:"datasource,omitempty"`
	Targets         []Target     `json:"targets,omitempty"`
	FieldConfig     *FieldConfig `json:"fieldConfig,omitempty"`
	Options         any          `json:"options,omitempty"`
	Repeat          string       `json:"repeat,omitempty"`
	RepeatDirection string       `json:"repeatDirection,omitempty"`
	Collapsed       *bool        `json:"collapsed,omitempty"`
	Panels          []*Panel     `json:"panels,omitempty"`
}

// Target is one PromQL query of a panel.
type Target struct {
	RefID        string     `json:"refId"`
	Datasource   Datasource `json:"datasource"`
	Expr         string     `json:"expr"`
	LegendFormat string     `json:"legendFormat"`
	Instant      bool       `json:"instant,omitempty"`
	Range        bool       `json:"range"`
}

// FieldConfig sets units, thresholds and styles.
type FieldConfig struct {
	Defaults  FieldDefaults `json:"defaults"`
	Overrides []Override    `json:"overrides"`
}

// FieldDefaults applies to every series of a panel.
type FieldDefaults struct {
	Unit       string         `json:"unit,omitempty"`
	Min        *float64       `json:"min,omitempty"`
	Max        *float64       `json:"max,omitempty"`
	Decimals   *int           `json:"decimals,omitempty"`
	Custom     map[string]any `json:"custom,omitempty"`
	Thresholds *Thresholds    `json:"thresholds,omitempty"`
	Color      map[string]any `json:"color,omitempty"`
	NoValue    string         `json:"noValue,omitempty"`
}

// Thresholds colour values.
type Thresholds struct {
	Mode  string `json:"mode"`
	Steps []Step `json:"steps"`
}

// Step is one threshold; a nil Value is the base step.
type Step struct {
	Color string   `json:"color"`
	Value *float64 `json:"value"`
}

// Override changes the style of matching series.
type Override struct {
	Matcher    Matcher    `json:"matcher"`
	Properties []Property `json:"properties"`
}

// Matcher selects series of an override.
type Matcher struct {
	ID      string `json:"id"`
	Options string `json:"options"`
}

// Property is one overridden setting.
type Property struct {
	ID    string `json:"id"`
	Value any    `json:"value"`
}
